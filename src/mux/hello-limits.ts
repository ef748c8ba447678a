/**
 * The bounds a hello's windows and largest frame must keep (docs/protocol.md,
 * Handshake): one check the session and the published test vectors share.
 *
 * @module
 */
import { MAX_WINDOW, MAX_WINDOW_BYTES } from "./options.ts";

/** The smallest byte window and `max_message_bytes` a hello may announce. */
export const MIN_HELLO_BYTES = 1024;

/** The window fields of a hello. */
export interface HelloWindows {
  readonly requestWindow: number;
  readonly responseWindow: number;
  readonly requestWindowBytes: number;
  readonly responseWindowBytes: number;
  readonly maxMessageBytes: number;
}

/**
 * Why the peer's hello grants no usable window, or undefined when its windows
 * are within bounds: frame windows 1 to {@link MAX_WINDOW}, byte windows
 * {@link MIN_HELLO_BYTES} to {@link MAX_WINDOW_BYTES}, `max_message_bytes` at
 * least {@link MIN_HELLO_BYTES}.
 */
export function helloWindowRefusal(hello: HelloWindows): string | undefined {
  if (
    hello.requestWindow < 1 ||
    hello.responseWindow < 1 ||
    hello.requestWindow > MAX_WINDOW ||
    hello.responseWindow > MAX_WINDOW ||
    hello.maxMessageBytes < MIN_HELLO_BYTES
  )
    return `the peer's hello grants no usable window (requests ${hello.requestWindow}, responses ${hello.responseWindow}, max message ${hello.maxMessageBytes} bytes)`;
  const badBytes = (bytes: number): boolean => bytes < MIN_HELLO_BYTES || bytes > MAX_WINDOW_BYTES;
  if (badBytes(hello.requestWindowBytes) || badBytes(hello.responseWindowBytes))
    return (
      `the peer's hello grants byte windows outside ${MIN_HELLO_BYTES} to ${MAX_WINDOW_BYTES} (requests ${hello.requestWindowBytes}, responses ${hello.responseWindowBytes} bytes); ` +
      "every hello must grant both byte windows (request_window_bytes and response_window_bytes)"
    );
  return undefined;
}

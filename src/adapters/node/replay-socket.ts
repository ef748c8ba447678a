/**
 * Handing a connection whose first bytes were already read to `node:http2`.
 * Node's and Deno's `node:http2` servers read what `socket.unshift` put back;
 * Bun's reads the socket natively and never sees those bytes, so the HTTP/2
 * preface is lost and it closes the connection with PROTOCOL_ERROR. There,
 * the server gets a stream that replays the bytes, then carries the socket's.
 *
 * @module
 */
import type { Socket } from "node:net";
import { Duplex } from "node:stream";

/** True when a `node:http2` server reads the bytes `socket.unshift` put back (Node, Deno; not Bun). */
export const UNSHIFT_REACHES_HTTP2: boolean =
  (globalThis as { process?: { versions?: { bun?: string } } }).process?.versions?.bun ===
  undefined;

/**
 * A duplex stream that yields `head`, then what `socket` reads, and writes
 * to `socket`, with the socket's backpressure both ways: it looks like the
 * socket (addresses, `bytesRead`, timeouts) to an HTTP server given it as a
 * connection. Ending or destroying either ends or destroys the other.
 */
export function replaySocket(socket: Socket, head: Uint8Array): Duplex {
  let first: Uint8Array | undefined = head;
  const stream = new Duplex({
    read() {
      if (first !== undefined) {
        const chunk = first;
        first = undefined;
        this.push(chunk);
      }
      socket.resume();
    },
    write(chunk: Buffer, _encoding, callback) {
      socket.write(chunk, callback);
    },
    final(callback) {
      socket.end(callback);
    },
    destroy(error, callback) {
      socket.destroy(error ?? undefined);
      callback(error);
    },
  });
  socket.on("data", (chunk: Buffer) => {
    if (!stream.push(chunk)) socket.pause();
  });
  socket.once("end", () => stream.push(null));
  socket.once("close", () => stream.destroy());
  socket.on("error", (error) => stream.destroy(error));
  Object.defineProperties(stream, {
    remoteAddress: { get: () => socket.remoteAddress },
    remotePort: { get: () => socket.remotePort },
    remoteFamily: { get: () => socket.remoteFamily },
    localAddress: { get: () => socket.localAddress },
    localPort: { get: () => socket.localPort },
    bytesRead: { get: () => socket.bytesRead },
    bytesWritten: { get: () => socket.bytesWritten },
  });
  const like = stream as Duplex &
    Partial<Pick<Socket, "setTimeout" | "setNoDelay" | "setKeepAlive" | "ref" | "unref">>;
  like.setTimeout = (ms: number, onTimeout?: () => void) => {
    socket.setTimeout(ms, onTimeout);
    return socket;
  };
  like.setNoDelay = (noDelay?: boolean) => socket.setNoDelay(noDelay);
  like.setKeepAlive = (enable?: boolean, delay?: number) => socket.setKeepAlive(enable, delay);
  like.ref = () => socket.ref();
  like.unref = () => socket.unref();
  return stream;
}

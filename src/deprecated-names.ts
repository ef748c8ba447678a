/**
 * Names the root entry point keeps only so that existing imports compile.
 *
 * @module
 */
import {
  MessageSchema as GeneratedMessageSchema,
  type Message as GeneratedMessage,
} from "./gen/kds/mux/v1/mux_pb.ts";

/**
 * The mux frame, `kds.mux.v1.Message`.
 *
 * @deprecated Use `MuxMessage`: this name shadows protobuf-es's `Message`
 * type wherever both are imported. It stays as an alias of the same type.
 */
export type Message = GeneratedMessage;

/**
 * The schema of the mux frame.
 *
 * @deprecated Use `MuxMessageSchema` (the same object), to go with `MuxMessage`.
 */
export const MessageSchema: typeof GeneratedMessageSchema = GeneratedMessageSchema;

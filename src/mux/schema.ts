/**
 * The mux wire schema, generated from proto/kds/mux/v1/mux.proto, under names
 * that do not collide with protobuf-es: the frame type `kds.mux.v1.Message`
 * is exported as `MuxMessage` (and its schema as `MuxMessageSchema`), so
 * `Message` in user code stays protobuf-es's `Message` type.
 *
 * @module
 */
export {
  type Message as MuxMessage,
  MessageSchema as MuxMessageSchema,
  type Batch,
  BatchSchema,
  type Hello,
  HelloSchema,
  type Ping,
  PingSchema,
  type Pong,
  PongSchema,
  type WindowUpdate,
  WindowUpdateSchema,
  type GoAway,
  GoAwaySchema,
  GoAwayReason,
  GoAwayReasonSchema,
  MultiplexService,
  file_kds_mux_v1_mux,
} from "../gen/kds/mux/v1/mux_pb.ts";

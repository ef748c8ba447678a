/**
 * The mux wire schema, generated from proto/kds/mux/v1/mux.proto: the frame
 * `kds.mux.v1.Frame` (schema `FrameSchema`), its control messages and the
 * service.
 *
 * @module
 */
export {
  type Frame,
  FrameSchema,
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

/**
 * The generated protobuf messages of the kds-mux wire: the mux frame, discovery, resources, kinds, auth and admin (protobuf-es types and `*Schema` descriptors).
 *
 * @module
 */
export * from "./gen/kds/mux/v1/half_duplex_pb.ts";
export * from "./gen/kds/admin/v1/admin_pb.ts";
export * from "./gen/kds/admin/v1/tokens_pb.ts";
export * from "./gen/kds/v1/auth_pb.ts";
export * from "./gen/kds/mux/v1/mux_pb.ts";
export * from "./gen/kds/v1/resource_pb.ts";
export * from "./gen/kds/v1/kinds_pb.ts";
export * from "./gen/kds/v1/discovery_pb.ts";

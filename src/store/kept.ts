/**
 * What a store keeps of a put: the caller's own spec and labels when the op
 * hands them over (`WriteOp.handOver`), copies otherwise; the labels frozen
 * either way. Every store keeps the same, so a caller's later change to its
 * objects reaches no stored resource.
 *
 * @module
 */
import { clone, type DescMessage, type Message } from "@bufbuild/protobuf";
import type { WriteOp } from "./contract.ts";

/** A put of a batch. */
export type PutOp = Extract<WriteOp, { op: "put" }>;

/** The spec to store for `op`, a message of `schema`. */
export function keptSpec(schema: DescMessage, op: PutOp): Message {
  return op.handOver === true ? op.input.spec : clone(schema, op.input.spec);
}

/** The frozen labels to store for `op`. */
export function keptLabels(op: PutOp): Readonly<Record<string, string>> {
  const labels = op.input.labels ?? {};
  return Object.freeze(op.handOver === true ? labels : { ...labels });
}

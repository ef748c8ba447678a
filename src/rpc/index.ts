/**
 * Reverse calls: Connect calls from the global to a zone inside its session.
 *
 * @module
 */
export {
  CALLER_HEADER,
  CallEndpoint,
  callEndpoint,
  type CallEndpointOptions,
} from "./endpoint.ts";
export {
  reverseCallTransport,
  type ReverseCallTransportOptions,
} from "./transport.ts";

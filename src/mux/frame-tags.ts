/**
 * The one-byte tags (field number << 3 | wire type 2) of the fields a delta
 * response frame, a plain delta ACK and a delta subscription are made of,
 * for the hand-written encoder (frame-encode.ts) and decoder
 * (frame-decode.ts).
 *
 * @module
 */

/** Frame.delta_request = 3 */
export const TAG_FRAME_DELTA_REQUEST = 0x1a;
/** Frame.delta_response = 4 */
export const TAG_FRAME_DELTA_RESPONSE = 0x22;
/** Frame.batch = 15 */
export const TAG_FRAME_BATCH = 0x7a;
/** Batch.frames = 1 */
export const TAG_BATCH_FRAMES = 0x0a;
/** DeltaDiscoveryResponse.system_version_info = 1 */
export const TAG_RESPONSE_VERSION = 0x0a;
/** DeltaDiscoveryResponse.resources = 2 */
export const TAG_RESPONSE_RESOURCES = 0x12;
/** DeltaDiscoveryResponse.type_url = 4 */
export const TAG_RESPONSE_TYPE_URL = 0x22;
/** DeltaDiscoveryResponse.nonce = 5 */
export const TAG_RESPONSE_NONCE = 0x2a;
/** DeltaDiscoveryResponse.removed_resources = 6 */
export const TAG_RESPONSE_REMOVED = 0x32;
/** DeltaDiscoveryRequest.node = 1 */
export const TAG_REQUEST_NODE = 0x0a;
/** DeltaDiscoveryRequest.type_url = 2 */
export const TAG_REQUEST_TYPE_URL = 0x12;
/** DeltaDiscoveryRequest.resource_names_subscribe = 3 */
export const TAG_REQUEST_SUBSCRIBE = 0x1a;
/** DeltaDiscoveryRequest.initial_resource_versions = 5 (a map entry each) */
export const TAG_REQUEST_INITIAL_VERSIONS = 0x2a;
/** DeltaDiscoveryRequest.response_nonce = 6 */
export const TAG_REQUEST_NONCE = 0x32;
/** Resource.version = 1 */
export const TAG_RESOURCE_VERSION = 0x0a;
/** Resource.resource = 2 */
export const TAG_RESOURCE_ANY = 0x12;
/** Resource.name = 3 */
export const TAG_RESOURCE_NAME = 0x1a;
/** Node.id = 1 */
export const TAG_NODE_ID = 0x0a;
/** Node.cluster = 2 */
export const TAG_NODE_CLUSTER = 0x12;
/** Node.user_agent_name = 6 */
export const TAG_NODE_USER_AGENT_NAME = 0x32;
/** Node.user_agent_version = 7 */
export const TAG_NODE_USER_AGENT_VERSION = 0x3a;
/** Node.client_features = 10 */
export const TAG_NODE_CLIENT_FEATURES = 0x52;
/** A map entry's key = 1 */
export const TAG_MAP_KEY = 0x0a;
/** A map entry's value = 2 */
export const TAG_MAP_VALUE = 0x12;
/** Any.type_url = 1 */
export const TAG_ANY_TYPE_URL = 0x0a;
/** Any.value = 2 */
export const TAG_ANY_VALUE = 0x12;

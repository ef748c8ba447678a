/**
 * The one-byte tags (field number << 3 | wire type 2) of the fields a delta
 * response frame (and a plain delta ACK) is made of, for the hand-written
 * encoder (frame-encode.ts) and decoder (frame-decode.ts).
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
/** DeltaDiscoveryRequest.type_url = 2 */
export const TAG_REQUEST_TYPE_URL = 0x12;
/** DeltaDiscoveryRequest.response_nonce = 6 */
export const TAG_REQUEST_NONCE = 0x32;
/** Resource.version = 1 */
export const TAG_RESOURCE_VERSION = 0x0a;
/** Resource.resource = 2 */
export const TAG_RESOURCE_ANY = 0x12;
/** Resource.name = 3 */
export const TAG_RESOURCE_NAME = 0x1a;
/** Any.type_url = 1 */
export const TAG_ANY_TYPE_URL = 0x0a;
/** Any.value = 2 */
export const TAG_ANY_VALUE = 0x12;

/**
 * The version of this kds-mux release, as package.json says (a test keeps
 * the two equal). It goes into the mux hello as the software version.
 *
 * @module
 */

/** The kds-mux package version. */
export const KDS_MUX_VERSION = "0.1.0";

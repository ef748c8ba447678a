/**
 * The base URL a server adapter reports: IPv6 hosts in brackets.
 *
 * @module
 */

/** `scheme://host:port`, bracketing an IPv6 host. */
export function baseUrl(scheme: "http" | "https", host: string, port: number): string {
  return `${scheme}://${host.includes(":") ? `[${host}]` : host}:${port}`;
}

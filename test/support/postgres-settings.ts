/**
 * Server settings for throwaway test servers: commits return before their WAL
 * is flushed (a crash may lose the last few commits, never corrupt the data).
 *
 * @module
 */
export const TEST_SERVER_SETTINGS: Readonly<Record<string, string>> = Object.freeze({
  synchronous_commit: "off",
  max_connections: "200",
});

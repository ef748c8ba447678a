/**
 * TLS files that are reloaded without a restart: a certificate, its key and
 * a CA, watched for changes (polled every second, so a file replaced by a
 * rename is seen too) and reloaded on SIGHUP. A new set is checked as a
 * whole (each file holds PEM, the key matches the certificate, the
 * certificate parses) before it replaces the old one; a bad set is refused
 * with an error log line and the old one stays in use. Listeners hear of
 * each accepted set: a server hands it to `setSecureContext`, so new
 * connections use it while established ones continue.
 *
 * @module
 */
import { unwatchFile, watchFile, type Stats } from "node:fs";
import { createPublicKey, X509Certificate, type KeyObject } from "node:crypto";
import { createSecureContext } from "node:tls";
import { KdsError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { readPem } from "./secret-files.ts";

/** PEM material: a certificate chain, its key, CA certificates. */
export interface TlsMaterial {
  readonly cert?: string;
  readonly key?: string;
  readonly ca?: string;
}

/** One watched file and the flag that named it (for log lines). */
export interface WatchedFile {
  readonly file: string;
  readonly flag: string;
}

/** How often the files are polled for changes, in ms. */
export const TLS_POLL_INTERVAL_MS = 1_000;
/** How long to wait after a change for the other files of a set (a certificate and its key are rarely written at once). */
export const TLS_SETTLE_MS = 300;

/** A short description of a PEM certificate chain's first certificate: serial, SHA-256 fingerprint, expiry. */
export function describeCertificate(pem: string): string {
  const cert = new X509Certificate(pem);
  return `serial ${cert.serialNumber}, sha256 ${cert.fingerprint256}, valid until ${cert.validTo}`;
}

const spki = (key: KeyObject): Buffer => key.export({ type: "spki", format: "der" });

/** "--tls-cert a.pem, --tls-key a-key.pem" */
function fileNames(files: Readonly<Record<string, WatchedFile | undefined>>): string {
  return Object.values(files)
    .filter((f): f is WatchedFile => f !== undefined)
    .map((f) => `${f.flag} ${f.file}`)
    .join(", ");
}

/** Reads and checks a set; throws (KdsError or the TLS library's error) when it is not usable. */
function load(files: Readonly<Record<keyof TlsMaterial, WatchedFile | undefined>>): TlsMaterial {
  const read = (f: WatchedFile | undefined): string | undefined =>
    f === undefined ? undefined : readPem(f.file, f.flag);
  const material: TlsMaterial = {
    cert: read(files.cert),
    key: read(files.key),
    ca: read(files.ca),
  };
  try {
    // Node's and Bun's TLS library check every block and that the key matches the certificate; Deno's
    // createSecureContext checks neither (2.9), so the certificate is parsed and the key compared here too.
    createSecureContext({ cert: material.cert, key: material.key, ca: material.ca });
    if (material.cert !== undefined) {
      const cert = new X509Certificate(material.cert);
      if (
        material.key !== undefined &&
        !spki(createPublicKey(material.key)).equals(spki(cert.publicKey))
      )
        throw new Error("key values mismatch: the key is not the certificate's");
    }
    if (material.ca !== undefined) new X509Certificate(material.ca);
  } catch (error) {
    throw new KdsError(
      "invalid_argument",
      `${fileNames(files)}: not usable TLS material (${error instanceof Error ? error.message : String(error)}); each file must hold PEM and the key must match the certificate`,
      { cause: error },
    );
  }
  return material;
}

/**
 * TLS material read from files and reloaded when they change or on SIGHUP,
 * until `signal` aborts. The constructor reads the files once and throws if
 * they are not usable (a bad start is an error, not a log line).
 */
export class ReloadingTls {
  readonly #files: Readonly<Record<keyof TlsMaterial, WatchedFile | undefined>>;
  readonly #logger: Logger;
  readonly #what: string;
  readonly #listeners: ((material: TlsMaterial) => void)[] = [];
  #current: TlsMaterial;
  #timer: ReturnType<typeof setTimeout> | undefined;

  /** `what` names the files' use in log lines, e.g. "the global's listeners". */
  constructor(
    files: { cert?: WatchedFile; key?: WatchedFile; ca?: WatchedFile },
    options: { what: string; logger: Logger; signal: AbortSignal },
  ) {
    this.#files = { cert: files.cert, key: files.key, ca: files.ca };
    this.#logger = options.logger;
    this.#what = options.what;
    this.#current = load(this.#files);
    const watched = [files.cert, files.key, files.ca].filter(
      (f): f is WatchedFile => f !== undefined,
    );
    const onChange = (now: Stats, before: Stats): void => {
      if (now.mtimeMs === before.mtimeMs && now.ino === before.ino && now.size === before.size)
        return;
      clearTimeout(this.#timer);
      this.#timer = setTimeout(() => this.reload("a file changed"), TLS_SETTLE_MS);
    };
    const onHangup = (): void => void this.reload("SIGHUP");
    for (const f of watched)
      watchFile(f.file, { interval: TLS_POLL_INTERVAL_MS, persistent: false }, onChange);
    process.on("SIGHUP", onHangup);
    const stop = (): void => {
      clearTimeout(this.#timer);
      for (const f of watched) unwatchFile(f.file, onChange);
      process.off("SIGHUP", onHangup);
    };
    if (options.signal.aborted) stop();
    else options.signal.addEventListener("abort", stop, { once: true });
  }

  /** The material in use: the last set that loaded. */
  get current(): TlsMaterial {
    return this.#current;
  }

  /** Calls `listener` with every set accepted from now on. */
  onReload(listener: (material: TlsMaterial) => void): void {
    this.#listeners.push(listener);
  }

  /** Reads the files again; true when a new set was accepted (unchanged files are not reloaded). */
  reload(reason: string): boolean {
    const names = fileNames(this.#files);
    let next: TlsMaterial;
    try {
      next = load(this.#files);
    } catch (error) {
      const kept =
        this.#current.cert === undefined
          ? "the previous files"
          : `the previous certificate (${describeCertificate(this.#current.cert)})`;
      this.#logger.error(
        `TLS reload of ${this.#what} refused (${reason}): ${error instanceof Error ? error.message : String(error)}; still using ${kept}. Fix ${names} (each PEM, the key matching the certificate) and the files are read again on their next change or on SIGHUP`,
      );
      return false;
    }
    if (
      next.cert === this.#current.cert &&
      next.key === this.#current.key &&
      next.ca === this.#current.ca
    ) {
      if (reason === "SIGHUP")
        this.#logger.info(`TLS reload of ${this.#what} (SIGHUP): ${names} unchanged`);
      return false;
    }
    try {
      for (const listener of this.#listeners) listener(next);
    } catch (error) {
      // A runtime whose servers cannot swap their TLS context (see docs/configuration.md) keeps the old one.
      this.#logger.error(
        `TLS reload of ${this.#what} (${reason}) could not be applied: ${error instanceof Error ? error.message : String(error)}; restart to use ${names}`,
      );
      return false;
    }
    this.#current = next;
    const cert = next.cert === undefined ? "" : `: certificate ${describeCertificate(next.cert)}`;
    this.#logger.info(
      `TLS reloaded for ${this.#what} (${reason}) from ${names}${cert}; new connections use it, established ones continue`,
    );
    return true;
  }
}

/**
 * For a process with no TLS files to reload: SIGHUP is logged and otherwise
 * ignored until `signal` aborts, instead of ending the process (Node's
 * default), since operators send it to ask for a reload.
 */
export function ignoreHangup(logger: Logger, signal: AbortSignal): void {
  const onHangup = (): void =>
    logger.info(
      "SIGHUP: no TLS files to reload (the configuration file and flags are read at start only)",
    );
  process.on("SIGHUP", onHangup);
  signal.addEventListener("abort", () => process.off("SIGHUP", onHangup), { once: true });
}

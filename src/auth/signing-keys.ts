/**
 * The keys that sign tokens, kept in the control plane's store as internal
 * `SigningKey` resources, so every instance sharing the store signs and
 * verifies with the same keys. The first key is created at first use; a
 * rotation adds a newer one (the newest signs, every kept key verifies);
 * retiring a key deletes it, and tokens it signed stop verifying.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { exportJWK, generateKeyPair, importJWK, type JWK } from "jose";
import { KdsError } from "../errors.ts";
import { SigningKeySpecSchema, type SigningKeySpec } from "../gen/kds/v1/auth_pb.ts";
import type { ResourceStore } from "../store/contract.ts";
import { SIGNING_KEY_KIND } from "../kinds/builtin-types.ts";
import type { StoredResource } from "../kinds/resource-types.ts";

/** The one algorithm kds-mux signs with: ECDSA P-256, available in WebCrypto on every runtime. */
export const SIGNING_ALGORITHM = "ES256";

/** A key that signs. */
export interface ActiveSigningKey {
  /** Its id: the resource name and the token header's `kid`. */
  readonly id: string;
  /** Higher is newer. */
  readonly serial: number;
  /** The private key. */
  readonly privateKey: CryptoKey;
}

/** The name of the key with `serial`. */
function keyName(serial: number): string {
  return `signing-key-${serial}`;
}

function serialOf(r: StoredResource): number {
  return Number((r.spec as SigningKeySpec).serial);
}

/** Signing keys over a store (contract v2). */
export class SigningKeys {
  readonly #store: ResourceStore;
  /** Imported public keys by id, tied to the version they were read at. */
  readonly #verifiers = new Map<string, { version: string; key: Promise<CryptoKey> }>();
  /** The imported private key of the last active key read. */
  #signer: { version: string; id: string; key: Promise<ActiveSigningKey> } | undefined;

  /** @param store - the control plane's store; its types must include SigningKey */
  constructor(store: ResourceStore) {
    this.#store = store;
  }

  /** The key that signs now: the newest; created on first use. */
  async active(signal?: AbortSignal): Promise<ActiveSigningKey> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const newest = await this.#newest(signal);
      if (newest !== undefined) return this.#importSigner(newest);
      // No key yet: create the first. Another instance may race us; then read its key.
      const created = await this.#create(1, signal);
      if (created !== undefined) return this.#importSigner(created);
    }
    throw new KdsError(
      "conflict",
      "could not create or read the first signing key after 5 attempts; check the store and retry",
    );
  }

  /** The public key with id `id`, or undefined when no such key is kept (retired, or never ours). */
  async verifier(id: string, signal?: AbortSignal): Promise<CryptoKey | undefined> {
    const stored = await this.#store.get(SIGNING_KEY_KIND, "", id, { signal });
    if (stored === undefined) {
      this.#verifiers.delete(id);
      return undefined;
    }
    const cached = this.#verifiers.get(id);
    if (cached !== undefined && cached.version === stored.meta.version) return cached.key;
    const spec = stored.spec as SigningKeySpec;
    const key = importKey(spec.publicKeyJwk, id, "public");
    this.#verifiers.set(id, { version: stored.meta.version, key });
    key.catch(() => this.#verifiers.delete(id)); // a bad key is reported to the caller, not cached
    return key;
  }

  /** Every kept key's id and serial, newest first. */
  async list(signal?: AbortSignal): Promise<{ id: string; serial: number }[]> {
    const { resources } = await this.#store.list(SIGNING_KEY_KIND, { signal });
    return resources
      .map((r) => ({ id: r.meta.name, serial: serialOf(r) }))
      .sort((a, b) => b.serial - a.serial);
  }

  /**
   * Adds a key newer than every kept one; it signs from now on. With
   * `retirePrevious`, deletes every older key (tokens they signed stop verifying).
   */
  async rotate(
    options: { retirePrevious?: boolean; signal?: AbortSignal } = {},
  ): Promise<{ id: string; retired: string[] }> {
    const { signal } = options;
    let created: StoredResource | undefined;
    for (let attempt = 0; attempt < 5 && created === undefined; attempt++) {
      const newest = await this.#newest(signal);
      created = await this.#create((newest === undefined ? 0 : serialOf(newest)) + 1, signal);
    }
    if (created === undefined)
      throw new KdsError(
        "conflict",
        "another instance kept rotating the signing key at the same time; retry",
      );
    const retired: string[] = [];
    if (options.retirePrevious === true) {
      for (const key of await this.list(signal)) {
        if (key.serial >= serialOf(created)) continue;
        if (await this.#store.delete(SIGNING_KEY_KIND, "", key.id, { signal }))
          retired.push(key.id);
        this.#verifiers.delete(key.id);
      }
    }
    return { id: created.meta.name, retired };
  }

  async #newest(signal: AbortSignal | undefined): Promise<StoredResource | undefined> {
    const { resources } = await this.#store.list(SIGNING_KEY_KIND, { signal });
    let newest: StoredResource | undefined;
    for (const r of resources)
      if (newest === undefined || serialOf(r) > serialOf(newest)) newest = r;
    return newest;
  }

  /** Creates key `serial`; undefined when another writer created that serial first. */
  async #create(
    serial: number,
    signal: AbortSignal | undefined,
  ): Promise<StoredResource | undefined> {
    const { privateKey, publicKey } = await generateKeyPair(SIGNING_ALGORITHM, {
      extractable: true,
    });
    const spec = create(SigningKeySpecSchema, {
      algorithm: SIGNING_ALGORITHM,
      privateKeyJwk: JSON.stringify(await exportJWK(privateKey)),
      publicKeyJwk: JSON.stringify(await exportJWK(publicKey)),
      serial: BigInt(serial),
    });
    try {
      return await this.#store.put(
        { kind: SIGNING_KEY_KIND, name: keyName(serial), spec },
        { expectedVersion: "", signal },
      );
    } catch (error) {
      if (KdsError.is(error, "conflict")) return undefined;
      throw error;
    }
  }

  #importSigner(stored: StoredResource): Promise<ActiveSigningKey> {
    const cached = this.#signer;
    if (
      cached !== undefined &&
      cached.id === stored.meta.name &&
      cached.version === stored.meta.version
    )
      return cached.key;
    const id = stored.meta.name;
    const key = importKey((stored.spec as SigningKeySpec).privateKeyJwk, id, "private").then(
      (privateKey) => ({ id, serial: serialOf(stored), privateKey }),
    );
    this.#signer = { version: stored.meta.version, id, key };
    key.catch(() => (this.#signer = undefined)); // reported to the caller, not cached
    return key;
  }
}

async function importKey(
  json: string,
  id: string,
  which: "public" | "private",
): Promise<CryptoKey> {
  try {
    const jwk = JSON.parse(json) as JWK;
    const key = await importJWK(jwk, SIGNING_ALGORITHM);
    if (key instanceof Uint8Array) throw new Error("a symmetric key, not an EC key");
    return key;
  } catch (error) {
    throw new KdsError(
      "invalid_resource",
      `signing key "${id}" in the store holds no valid ${which} ${SIGNING_ALGORITHM} key; rotate the signing key (kds-mux rotate signing-key --retire-previous)`,
      { cause: error },
    );
  }
}

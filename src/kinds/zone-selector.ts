/**
 * Zone selectors: which zones a global resource (its `kds.io/zones` label)
 * or a whole kind (`ResourceTypeInit.zones`, `zones:` in kinds.yaml) goes
 * to, as a label selector on the zones' labels (the labels of their Zone
 * resources, plus `kds.io/zone: <name>` on every zone).
 *
 * The syntax is Kubernetes' label selector, in text: requirements separated
 * by commas, all of which must hold:
 *
 * - `key=value` (or `key==value`), `key!=value`;
 * - `key in (v1, v2)`, `key notin (v1, v2)`;
 * - `key` (the zone has the label), `!key` (it has not).
 *
 * Keys are letters, digits, `.`, `_`, `-` and `/`; values letters, digits,
 * `.`, `_` and `-`. An empty selector selects every zone.
 *
 * @module
 */
import { KdsError } from "../errors.ts";

/** Every zone's implicit label: its name (LABELS.zone; spelled out here so resource-types.ts can import this module). */
const ZONE_NAME_LABEL = "kds.io/zone";

/** The label of a global resource that names the zones it goes to (a zone selector). */
export const ZONES_LABEL = "kds.io/zones";

/** One requirement of a selector. */
export type ZoneRequirement =
  | { readonly op: "in" | "notin"; readonly key: string; readonly values: readonly string[] }
  | { readonly op: "exists" | "!exists"; readonly key: string };

/** A parsed zone selector: every requirement must hold. */
export interface ZoneSelector {
  /** The selector as written. */
  readonly text: string;
  /** Its requirements. */
  readonly requirements: readonly ZoneRequirement[];
}

const KEY = /^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?$/;
const VALUE = /^([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?$/;

/**
 * Parses `text`; throws `invalid_argument` naming the requirement that is
 * wrong and showing the syntax. `what` says whose selector it is.
 */
export function parseZoneSelector(text: string, what = "zone selector"): ZoneSelector {
  const requirements: ZoneRequirement[] = [];
  const fail = (part: string, why: string): never => {
    throw new KdsError(
      "invalid_argument",
      `${what} "${text}": ${part === "" ? "" : `"${part}" `}${why}. Write requirements separated by commas: key=value, key!=value, key in (a, b), key notin (a, b), key, !key (for example "region=eu,tier!=dev")`,
    );
  };
  for (const part of splitTop(text, fail)) {
    const p = part.trim();
    if (p === "") {
      if (text.trim() === "") continue;
      fail("", "has an empty requirement");
    }
    const set = /^(\S+)\s+(in|notin)\s*\((.*)\)$/.exec(p);
    if (set !== null) {
      const [, key = "", op = "in", list = ""] = set;
      if (!KEY.test(key)) fail(p, `has an invalid key "${key}"`);
      const values = list.split(",").map((v) => v.trim());
      for (const v of values)
        if (v === "" || !VALUE.test(v)) fail(p, `has an invalid value "${v}"`);
      requirements.push({ op: op as "in" | "notin", key, values });
      continue;
    }
    const eq = /^([^!=\s]+)\s*(==|!=|=)\s*(\S*)$/.exec(p);
    if (eq !== null) {
      const [, key = "", op = "=", value = ""] = eq;
      if (!KEY.test(key)) fail(p, `has an invalid key "${key}"`);
      if (!VALUE.test(value)) fail(p, `has an invalid value "${value}"`);
      requirements.push({ op: op === "!=" ? "notin" : "in", key, values: [value] });
      continue;
    }
    const exists = /^(!?)\s*(\S+)$/.exec(p);
    if (exists !== null && KEY.test(exists[2] ?? "")) {
      requirements.push({ op: exists[1] === "!" ? "!exists" : "exists", key: exists[2] as string });
      continue;
    }
    fail(p, "is not a requirement");
  }
  return Object.freeze({ text, requirements: Object.freeze(requirements) });
}

/** Splits at commas outside parentheses. */
function splitTop(text: string, fail: (part: string, why: string) => never): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "(") depth++;
    else if (c === ")") {
      depth--;
      if (depth < 0) fail("", "closes a parenthesis it never opened");
    } else if (c === "," && depth === 0) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  if (depth !== 0) fail("", "leaves a parenthesis open");
  parts.push(text.slice(start));
  return parts;
}

/** Whether a zone named `zone` with `labels` is selected by `selector` (its name is the label `kds.io/zone`). */
export function selectsZone(
  selector: ZoneSelector,
  zone: string,
  labels: Readonly<Record<string, string>>,
): boolean {
  const value = (key: string): string | undefined => (key === ZONE_NAME_LABEL ? zone : labels[key]);
  for (const r of selector.requirements) {
    const v = value(r.key);
    switch (r.op) {
      case "exists":
        if (v === undefined) return false;
        break;
      case "!exists":
        if (v !== undefined) return false;
        break;
      case "in":
        if (v === undefined || !r.values.includes(v)) return false;
        break;
      case "notin":
        if (v !== undefined && r.values.includes(v)) return false;
        break;
    }
  }
  return true;
}

/** Most parsed selectors {@link SelectorMemo} keeps before it starts over. */
const MEMO_LIMIT = 10_000;

/**
 * Parsed `kds.io/zones` selectors by text, so a stream's filter parses each
 * selector once. A text that does not parse (a resource written around the
 * admin API, which refuses it) selects no zone.
 */
export class SelectorMemo {
  readonly #parsed = new Map<string, ZoneSelector | null>();

  /** The parsed selector, or null when `text` is not one. */
  get(text: string): ZoneSelector | null {
    let parsed = this.#parsed.get(text);
    if (parsed === undefined) {
      try {
        parsed = parseZoneSelector(text);
      } catch {
        parsed = null; // not lost: such a resource goes to no zone, and the admin API refuses to write it
      }
      if (this.#parsed.size >= MEMO_LIMIT) this.#parsed.clear();
      this.#parsed.set(text, parsed);
    }
    return parsed;
  }
}

/**
 * Whether the global sends `resource` to `zone` (with `labels`) as far as
 * selectors go: its kind's selector (`zones`) and its own `kds.io/zones`
 * label must both select the zone.
 */
export function selectedFor(
  zone: string,
  labels: Readonly<Record<string, string>>,
  kindSelector: ZoneSelector | undefined,
  resourceLabels: Readonly<Record<string, string>>,
  memo: SelectorMemo,
): boolean {
  if (kindSelector !== undefined && !selectsZone(kindSelector, zone, labels)) return false;
  const text = resourceLabels[ZONES_LABEL];
  if (text === undefined) return true;
  const own = memo.get(text);
  return own !== null && selectsZone(own, zone, labels);
}

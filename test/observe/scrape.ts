// Scraping /metrics the way Prometheus does (HTTP/1.1 GET) and reading it with
// a real parser of the Prometheus text format (prom2javascript).
import {
  getMetricsFromIterator,
  type PromHistogramData,
  type PromMetric,
  type PromMetrics,
} from "prom2javascript";

type Sample = { labels: Record<string, string>; value?: number; count?: number };

/** The parsed families of one scrape, with lookups. */
export class Scrape {
  constructor(
    readonly families: PromMetrics,
    readonly text: string,
  ) {}

  /** The family `name`; throws naming the families there are when it is missing. */
  family(name: string): PromMetric {
    const f = this.families[name];
    if (f === undefined)
      throw new Error(
        `no metric family ${name}; the scrape has ${Object.keys(this.families).join(", ")}`,
      );
    return f;
  }

  /** Samples of `name` whose labels include `labels`. */
  samples(name: string, labels: Record<string, string> = {}): Sample[] {
    return (this.family(name).data as Sample[]).filter((m) =>
      Object.entries(labels).every(([k, v]) => m.labels[k] === v),
    );
  }

  /** Sum of the values of a counter or gauge over the matching samples. */
  value(name: string, labels: Record<string, string> = {}): number {
    return this.samples(name, labels).reduce((sum, m) => sum + (m.value ?? 0), 0);
  }

  /** Sum of the observation counts of a histogram over the matching samples. */
  count(name: string, labels: Record<string, string> = {}): number {
    return (this.samples(name, labels) as PromHistogramData[]).reduce((sum, m) => sum + m.count, 0);
  }
}

/** Parses a text exposition. */
export async function parseMetrics(text: string): Promise<Scrape> {
  return new Scrape(await getMetricsFromIterator(text.split("\n")[Symbol.iterator]()), text);
}

/** GETs `${baseUrl}/metrics` over HTTP/1.1 and parses it; fails on a non-200 or a wrong content type. */
export async function scrape(baseUrl: string): Promise<Scrape> {
  const response = await fetch(`${baseUrl}/metrics`, { signal: AbortSignal.timeout(10_000) });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`GET /metrics answered ${response.status}: ${text}`);
  const type = response.headers.get("content-type") ?? "";
  if (!type.startsWith("text/plain"))
    throw new Error(`GET /metrics answered content-type "${type}", not the Prometheus text format`);
  return parseMetrics(text);
}

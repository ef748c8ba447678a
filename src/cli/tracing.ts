/**
 * `--otlp-endpoint URL` of `kds-mux global` and `kds-mux zone`: registers
 * the OpenTelemetry SDK (`@opentelemetry/sdk-trace-base`) with an OTLP/HTTP
 * exporter (`@opentelemetry/exporter-trace-otlp-http`, JSON over HTTP) as
 * the global tracer provider before the control plane starts, so its spans
 * (docs/observability.md, "Tracing") reach a collector. Both packages are
 * imported only then: without the flag neither is loaded.
 *
 * @module
 */
import { trace } from "@opentelemetry/api";
import { InvalidArgumentError, Option } from "commander";
import type { Logger } from "../log.ts";

/** The flag's example, in its help and its error. */
const EXAMPLE = "http://127.0.0.1:4318/v1/traces";

/** `--otlp-endpoint <url>`: where spans are exported (file key `otlp-endpoint`, `KDS_MUX_OTLP_ENDPOINT`). */
export function otlpEndpointOption(): Option {
  return new Option(
    "--otlp-endpoint <url>",
    `export trace spans over OTLP/HTTP (JSON) to this collector URL, e.g. ${EXAMPLE} (default: no tracing)`,
  ).argParser(parseOtlpEndpoint);
}

/** The URL `value` names, or an error a user reads next to the flag's name (commander adds it). */
export function parseOtlpEndpoint(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError(
      `"${value}" is not a URL; give the collector's OTLP/HTTP traces URL, e.g. ${EXAMPLE}`,
    );
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new InvalidArgumentError(
      `"${value}" is a ${url.protocol} URL; OTLP/HTTP needs http: or https:, e.g. ${EXAMPLE}`,
    );
  return url.href;
}

/** A running exporter. */
export interface Tracing {
  /** Exports what is left and unregisters the SDK. */
  stop(): Promise<void>;
}

/**
 * Registers the SDK exporting to `endpoint` as the global tracer provider;
 * undefined `endpoint`: does nothing. Call before the control plane is made
 * (its engine and sessions look for a tracer when they start).
 */
export async function startTracing(
  endpoint: string | undefined,
  logger: Logger,
): Promise<Tracing | undefined> {
  if (endpoint === undefined) return undefined;
  const [{ BasicTracerProvider, BatchSpanProcessor }, { OTLPTraceExporter }] = await Promise.all([
    import("@opentelemetry/sdk-trace-base"),
    import("@opentelemetry/exporter-trace-otlp-http"),
  ]);
  const exporter = new OTLPTraceExporter({ url: endpoint });
  const provider = new BasicTracerProvider({
    spanProcessors: [new BatchSpanProcessor(exporter, { scheduledDelayMillis: 1_000 })],
  });
  if (!trace.setGlobalTracerProvider(provider))
    logger.warn(
      "another OpenTelemetry tracer provider is already registered in this process; --otlp-endpoint is not used",
    );
  else logger.info(`exporting trace spans over OTLP/HTTP to ${endpoint}`);
  return {
    stop: async () => {
      try {
        await provider.shutdown();
      } catch (error) {
        logger.warn(`exporting the last trace spans to ${endpoint} failed`, { error });
      }
      trace.disable();
    },
  };
}

import { describe, expect, it } from "vitest";
import { PrometheusMetrics } from "../../src/observe/prometheus.ts";

/** The value of `name` for the given labels in a Prometheus text scrape (undefined when absent). */
function sample(text: string, name: string, labels: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? undefined : Number(line.split(" ").at(-1));
}

describe("frame counters summed between scrapes", () => {
  it("every frame and byte reaches its counter exactly once, whatever the scrapes between", async () => {
    const metrics = new PrometheusMetrics();
    metrics.frames("sent", "responses", 1, 100);
    metrics.frames("sent", "responses", 3, 50);
    metrics.frames("received", "control", 2, 8);
    const first = await metrics.registry.metrics();
    expect(sample(first, "kds_mux_frames_total", 'direction="sent",lane="responses"')).toBe(4);
    expect(sample(first, "kds_mux_frame_bytes_total", 'direction="sent",lane="responses"')).toBe(
      150,
    );
    expect(sample(first, "kds_mux_frames_total", 'direction="received",lane="control"')).toBe(2);
    expect(sample(first, "kds_mux_frames_total", 'direction="sent",lane="requests"')).toBe(
      undefined,
    );
    // A scrape with nothing new leaves the totals as they were (nothing counted twice).
    const second = await metrics.registry.metrics();
    expect(sample(second, "kds_mux_frames_total", 'direction="sent",lane="responses"')).toBe(4);
    metrics.frames("sent", "responses", 1, 10);
    const counter = metrics.registry.getSingleMetric("kds_mux_frame_bytes_total");
    const values = (await counter?.get())?.values ?? [];
    const sent = values.find((v) => v.labels.direction === "sent" && v.labels.lane === "responses");
    expect(sent?.value).toBe(160);
    const third = await metrics.registry.metrics();
    expect(sample(third, "kds_mux_frames_total", 'direction="sent",lane="responses"')).toBe(5);
    expect(sample(third, "kds_mux_frame_bytes_total", 'direction="sent",lane="responses"')).toBe(
      160,
    );
  });
});

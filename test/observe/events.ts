// Reading a server-sent event stream from fetch, one event at a time.

/** One event: its name and data. */
export interface ServerEvent {
  readonly event: string;
  readonly data: string;
}

/** Reads `response`'s body as server-sent events. */
export async function* serverEvents(response: Response): AsyncGenerator<ServerEvent> {
  if (response.body === null) throw new Error("the event stream has no body");
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += value;
      for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let event = "message";
        const data: string[] = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
        }
        if (data.length > 0) yield { event, data: data.join("\n") };
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined); // the stream is being abandoned
  }
}

/** Reads events until one satisfies `test`; fails after `timeoutMs`. */
export async function nextMatching<T>(
  events: AsyncIterator<ServerEvent>,
  parse: (e: ServerEvent) => T,
  test: (value: T) => boolean,
  what: string,
  timeoutMs = 15_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  while (Date.now() < deadline) {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<"timeout">(
      (resolve) =>
        (timer = setTimeout(() => resolve("timeout"), Math.max(1, deadline - Date.now()))),
    );
    const next = await Promise.race([events.next(), timeout]);
    clearTimeout(timer);
    if (next === "timeout") break;
    if (next.done === true) throw new Error(`the event stream ended while waiting for ${what}`);
    last = parse(next.value);
    if (test(last)) return last;
  }
  throw new Error(
    `no event within ${timeoutMs} ms showed ${what}; the last was ${JSON.stringify(last)}`,
  );
}

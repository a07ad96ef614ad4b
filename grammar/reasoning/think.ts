/**
 * Splits a reasoning model's output into `reasoning_content` and `content` at `<think>…</think>`
 * (DeepSeek-R1, Qwen3 and their kin), streamed or whole.
 *
 * - `startsInReasoning`: the chat template already opened `<think>` in the prompt, so all text up
 *   to `</think>` is reasoning (a `<think>` the model repeats at the very start is dropped).
 * - Otherwise only a `<think>` at the very start (after whitespace) opens reasoning; any other
 *   output is all content.
 * - No `</think>` by the end: everything after the opening is reasoning.
 * Both parts are trimmed (templates put newlines around the tags). A tag split across chunks is
 * held back, never streamed as text; `splitReasoning` is the stream parser fed the whole text,
 * so streamed and unary responses split the same way.
 */
import { TrimmedStream, partialMarkerLength } from '../stream-text.js';

export interface ReasoningSplit {
  reasoning: string;
  content: string;
}

/**
 * Where the output stands: `undecided` while what came so far could still open reasoning (only
 * whitespace or a prefix of `<think>`), then `reasoning`, then `content`, in that order only.
 */
export type ReasoningPhase = 'undecided' | 'reasoning' | 'content';

export interface ReasoningStreamParser {
  push(text: string): ReasoningSplit;
  finish(): ReasoningSplit;
  /** The phase after the text pushed so far (counting reasoning tokens reads it around each push). */
  readonly phase: ReasoningPhase;
  /** Whether the output has been in reasoning at all (a push may go from undecided to content through it). */
  readonly reasoned: boolean;
}

export const THINK_OPEN = '<think>';
export const THINK_CLOSE = '</think>';

class ThinkParser implements ReasoningStreamParser {
  /** 'opening': a leading `<think>` may still come; `opensReasoning` says what follows if none does. */
  private state: 'opening' | 'reasoning' | 'content' = 'opening';
  reasoned = false;
  private buf = '';
  private readonly reasoningOut = new TrimmedStream();
  private readonly contentOut = new TrimmedStream();

  constructor(private readonly opensReasoning: boolean) {}

  get phase(): ReasoningPhase {
    // The template opened <think>: all output is reasoning until </think>, a repeated tag or not.
    if (this.state === 'opening') return this.opensReasoning ? 'reasoning' : 'undecided';
    return this.state;
  }

  push(text: string): ReasoningSplit {
    if (this.state === 'content') return { reasoning: '', content: this.contentOut.push(text) };
    this.buf += text;
    return this.drain(false);
  }

  finish(): ReasoningSplit {
    return this.drain(true);
  }

  private drain(final: boolean): ReasoningSplit {
    let reasoning = '';
    let content = '';
    if (this.state === 'opening') {
      const start = this.buf.length - this.buf.trimStart().length;
      const rest = this.buf.slice(start);
      if (rest.startsWith(THINK_OPEN)) {
        this.buf = rest.slice(THINK_OPEN.length);
        this.state = 'reasoning';
      } else if (!final && THINK_OPEN.startsWith(rest)) {
        return { reasoning, content };
      } else {
        this.state = this.opensReasoning ? 'reasoning' : 'content';
      }
      this.reasoned = this.state === 'reasoning';
    }
    if (this.state === 'reasoning') {
      const close = this.buf.indexOf(THINK_CLOSE);
      if (close < 0) {
        const hold = final ? 0 : partialMarkerLength(this.buf, THINK_CLOSE);
        reasoning = this.reasoningOut.push(this.buf.slice(0, this.buf.length - hold));
        this.buf = this.buf.slice(this.buf.length - hold);
        return { reasoning, content };
      }
      reasoning = this.reasoningOut.push(this.buf.slice(0, close));
      this.buf = this.buf.slice(close + THINK_CLOSE.length);
      this.state = 'content';
    }
    content = this.contentOut.push(this.buf);
    this.buf = '';
    return { reasoning, content };
  }
}

/** `<think>…</think>`. startsInReasoning: the template already opened <think> (Qwen3/DeepSeek-R1 add it to the prompt). */
export function createReasoningParser(opts?: { startsInReasoning?: boolean }): ReasoningStreamParser {
  return new ThinkParser(opts?.startsInReasoning ?? false);
}

export function splitReasoning(text: string, opts?: { startsInReasoning?: boolean }): ReasoningSplit {
  const parser = createReasoningParser(opts);
  const first = parser.push(text);
  const last = parser.finish();
  return { reasoning: first.reasoning + last.reasoning, content: first.content + last.content };
}

/**
 * What a request asks its output to match. The frontend validates it (a bad spec is a 400 that
 * names the problem) and carries it to the worker on `PreprocessedRequest.structured`; the
 * worker compiles it against its tokenizer's vocabulary (cached) and masks every sampling step.
 *
 * The spec travels as data, not as a compiled grammar: it is small, it is the cache key, and
 * each worker compiles against its own vocabulary.
 */
export type StructuredOutputSpec =
  /** Any JSON object (OpenAI `response_format: {type: "json_object"}`). */
  | { kind: 'json_object' }
  /** A JSON Schema (OpenAI `json_schema`, vLLM `structured_outputs.json`). */
  | { kind: 'json_schema'; schema: unknown }
  /** A regular expression the whole output must match (vLLM `structured_outputs.regex`). */
  | { kind: 'regex'; pattern: string }
  /** Exactly one of these strings (vLLM `structured_outputs.choice`). */
  | { kind: 'choice'; choices: string[] }
  /** A GBNF-style EBNF grammar whose start rule is `root` (vLLM `structured_outputs.grammar`). */
  | { kind: 'grammar'; ebnf: string }
  /**
   * One or more tool calls in a model family's format (`tool_choice: "required"` or a named
   * function). The format's literal framing comes from grammar/tool-calls/formats.ts, so the
   * grammar that constrains the output and the parser that reads it back agree.
   */
  | {
      kind: 'tool_calls';
      format: ToolCallFormatName;
      tools: Array<{ name: string; parameters: unknown }>;
      /** false = exactly one call. */
      parallel: boolean;
    };

export type ToolCallFormatName = 'hermes' | 'llama3_json' | 'mistral';

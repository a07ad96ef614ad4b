/**
 * The served model decides how tool calls are forced and read back (issue 16): a frontend over
 * real make-tiny model directories (real chat templates and tokenizers) and scripted workers,
 * over a real socket. The tool-call format comes from each model's chat template
 * (`--tool-call-parser auto`), and `--reasoning-parser think` notices a template that opens
 * `<think>` in the prompt.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFrontend, type FrontendHandle } from '../../frontend/frontend.js';
import { loadTokenizer } from '../../frontend/preprocess/index.js';
import { makeTinyModel, type TinyArch } from '../../workers/models/index.js';
import { FakeCluster } from './fakes.js';
import { postRaw, waitFor } from './harness.js';

const tools = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
  { type: 'function', function: { name: 'now' } },
];
const messages = [{ role: 'user', content: 'Weather in Paris?' }];

describe('structured requests over real tiny models', () => {
  let root: string;
  let cluster: FakeCluster;
  let frontend: FrontendHandle;
  const decoders = new Map<string, (ids: number[]) => string>();

  /** A tiny model served under `name` whose worker answers `answer`, then EOS. */
  async function serve(name: string, arch: TinyArch, answer: string, template?: (source: string) => string): Promise<void> {
    const dir = join(root, name);
    const info = await makeTinyModel({ arch, outDir: dir });
    if (template) {
      const path = join(dir, 'tokenizer_config.json');
      const config = JSON.parse(await readFile(path, 'utf8')) as { chat_template: string };
      config.chat_template = template(config.chat_template);
      await writeFile(path, JSON.stringify(config));
    }
    const tokenizer = await loadTokenizer(dir);
    decoders.set(name, (ids) => tokenizer.decode(ids, { skipSpecialTokens: false }));
    await cluster.addWorker(
      { tokens: tokenizer.encode(answer, { addSpecialTokens: false }), eos: info.eosTokenIds[0]! },
      { name, modelPath: dir, tokenizerSource: dir, chatTemplateSource: dir, eosTokenIds: info.eosTokenIds, contextLength: 4096 },
    );
  }

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'tandem-structured-models-'));
    cluster = new FakeCluster();
    await serve('tiny-llama', 'llama', '{"name": "get_weather", "parameters": {"city": "Paris"}}');
    await serve('tiny-qwen2', 'qwen2', '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>');
    // DeepSeek-R1 style: the generation prompt already opens the reasoning block.
    await serve('tiny-r1', 'qwen3', 'the user wants weather</think>\n\nIt is sunny.', (source) => `${source}{%- if add_generation_prompt %}{{- '<think>\\n' }}{%- endif %}`);
    await serve('tiny-qwen3', 'qwen3', '<think>\nplan\n</think>\n\nanswer');
    frontend = await startFrontend({ discovery: cluster.frontendDiscovery, connector: cluster, host: '127.0.0.1', httpPort: 0, reasoningParser: 'think' });
    await waitFor(() => frontend.models.names().length === 4);
    await frontend.models.settled();
  }, 60_000);
  afterAll(async () => {
    await frontend?.close();
    await cluster?.close();
    await rm(root, { recursive: true, force: true });
  });

  const chat = async (model: string, extra: Record<string, unknown>) => {
    const res = await postRaw(`${frontend.url}/v1/chat/completions`, JSON.stringify({ model, messages, max_tokens: 64, ...extra }));
    expect(res.status, res.text).toBe(200);
    return { body: JSON.parse(res.text) as { choices: Array<{ message: Record<string, unknown>; finish_reason: string }> }, call: cluster.allCalls().at(-1)! };
  };

  it("tool_choice required on a Llama 3.1-style template forces llama3_json calls and reads them back", async () => {
    const { body, call } = await chat('tiny-llama', { tools, tool_choice: 'required' });
    expect(call.request.structured).toMatchObject({ kind: 'tool_calls', format: 'llama3_json', parallel: true });
    expect((call.request.structured as { tools: Array<{ name: string }> }).tools.map((t) => t.name)).toEqual(['get_weather', 'now']);
    expect(decoders.get('tiny-llama')!(call.request.tokenIds)).toContain('Environment: ipython');
    const calls = body.choices[0]!.message.tool_calls as Array<{ function: { name: string; arguments: string } }>;
    expect(calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([['get_weather', { city: 'Paris' }]]);
    expect(body.choices[0]!.finish_reason).toBe('tool_calls');
  });

  it('tool_choice auto on a Hermes template: no grammar, calls parsed from the output', async () => {
    const { body, call } = await chat('tiny-qwen2', { tools });
    expect(call.request.structured).toBeUndefined();
    expect(decoders.get('tiny-qwen2')!(call.request.tokenIds)).toContain('<tools>\n{"type": "function"');
    const calls = body.choices[0]!.message.tool_calls as Array<{ function: { name: string; arguments: string } }>;
    expect(calls.map((c) => c.function.name)).toEqual(['now']);
  });

  it('a named function forces one call in the Hermes format', async () => {
    const { call } = await chat('tiny-qwen2', { tools, tool_choice: { type: 'function', function: { name: 'now' } } });
    expect(call.request.structured).toMatchObject({ kind: 'tool_calls', format: 'hermes', tools: [{ name: 'now' }], parallel: false });
  });

  it('tool_choice none still renders the tools but parses no calls', async () => {
    const { body, call } = await chat('tiny-qwen2', { tools, tool_choice: 'none' });
    expect(call.request.structured).toBeUndefined();
    expect(decoders.get('tiny-qwen2')!(call.request.tokenIds)).toContain('<tools>');
    expect(body.choices[0]!.message.tool_calls).toBeUndefined();
    expect(body.choices[0]!.message.content).toContain('<tool_call>');
  });

  it('--reasoning-parser think: a prompt that opens <think> makes the output start as reasoning', async () => {
    const { body } = await chat('tiny-r1', {});
    expect(body.choices[0]!.message.reasoning_content).toBe('the user wants weather');
    expect(body.choices[0]!.message.content).toBe('It is sunny.');
  });

  it('--reasoning-parser think on a Qwen3 template: the model opens <think> itself', async () => {
    for (const kwargs of [undefined, { enable_thinking: false }]) {
      const { body } = await chat('tiny-qwen3', kwargs ? { chat_template_kwargs: kwargs } : {});
      expect(body.choices[0]!.message.reasoning_content).toBe('plan');
      expect(body.choices[0]!.message.content).toBe('answer');
    }
  });
});

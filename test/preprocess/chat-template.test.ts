import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplate, ChatTemplateError, ChatTemplateMissingError, loadTokenizer } from '../../frontend/preprocess/index.js';
import { tinyModels } from './fixtures.js';

let models: Awaited<ReturnType<typeof tinyModels>>;
beforeAll(async () => {
  models = await tinyModels(['llama', 'qwen2', 'qwen3']);
});
afterAll(async () => models.cleanup());

const conversation = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Hello!' },
];

describe('ChatTemplate', () => {
  it('qwen2 renders ChatML and opens the assistant turn', async () => {
    const t = await ChatTemplate.load(models.dir('qwen2'));
    expect(t.render(conversation)).toBe('<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n');
  });

  it('qwen2 inserts its default system prompt when the conversation has none', async () => {
    const t = await ChatTemplate.load(models.dir('qwen2'));
    expect(t.render([{ role: 'user', content: 'Hi' }], { addGenerationPrompt: false })).toBe(
      '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n',
    );
  });

  it('llama renders the Llama 3 headers with bos_token first and trimmed content', async () => {
    const t = await ChatTemplate.load(models.dir('llama'));
    expect(t.render([conversation[0]!, { role: 'user', content: '  Hello!\n' }])).toBe(
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>' +
        '<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    );
  });

  it('llama: the rendered prompt encoded without special tokens starts with exactly one BOS', async () => {
    const t = await ChatTemplate.load(models.dir('llama'));
    const tok = await loadTokenizer(models.dir('llama'));
    const ids = tok.encode(t.render(conversation), { addSpecialTokens: false });
    expect(ids[0]).toBe(tok.bosTokenId);
    expect(ids[1]).toBe(tok.tokenId('<|start_header_id|>'));
    expect(ids.filter((id) => id === tok.bosTokenId)).toHaveLength(1);
    expect(ids.at(-1)).toBe(tok.encode('\n\n', { addSpecialTokens: false }).at(-1));
  });

  it('qwen3 honours enable_thinking and renders reasoning blocks of the last turn', async () => {
    const t = await ChatTemplate.load(models.dir('qwen3'));
    expect(t.render(conversation)).toBe('<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n');
    expect(t.render(conversation, { variables: { enable_thinking: false } }).endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
    const history = [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: '<think>\nthey greet\n</think>\n\nHello' },
    ];
    expect(t.render(history, { addGenerationPrompt: false })).toBe(
      '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nthey greet\n</think>\n\nHello<|im_end|>\n',
    );
  });

  it('qwen3 lists tools in the system turn', async () => {
    const t = await ChatTemplate.load(models.dir('qwen3'));
    const tools = [{ type: 'function', function: { name: 'now', description: 'time', parameters: { type: 'object', properties: {} } } }];
    const out = t.render([{ role: 'user', content: 'time?' }], { tools });
    expect(out).toContain('<tools>\n{"type": "function", "function": {"name": "now"');
    expect(out.startsWith('<|im_start|>system\n# Tools')).toBe(true);
  });

  const weatherTool = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } };
  const toolConversation = [
    { role: 'user', content: 'Weather in Paris and Rome?' },
    {
      role: 'assistant',
      content: '',
      tool_calls: [
        { id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
        { id: 'c2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
      ],
    },
    { role: 'tool', tool_call_id: 'c1', content: '20C' },
    { role: 'tool', tool_call_id: 'c2', content: '25C' },
  ];

  it('qwen2 renders tools, calls and results Hermes style (as Qwen2.5 does)', async () => {
    const t = await ChatTemplate.load(models.dir('qwen2'));
    const out = t.render([{ role: 'system', content: 'You are terse.' }, ...toolConversation], { tools: [weatherTool] });
    expect(out.startsWith('<|im_start|>system\nYou are terse.\n\n# Tools\n')).toBe(true);
    expect(out).toContain('<tools>\n{"type": "function", "function": {"name": "get_weather"');
    expect(out).toContain(
      '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Rome"}}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\n<tool_response>\n20C\n</tool_response>\n<tool_response>\n25C\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
    );
    // The system message is folded into the tools turn, not repeated.
    expect(out.match(/You are terse/g)).toHaveLength(1);
  });

  it('llama renders tools, calls and results as Llama 3.1 JSON tool calling', async () => {
    const t = await ChatTemplate.load(models.dir('llama'));
    const out = t.render(toolConversation, { tools: [weatherTool] });
    expect(out.startsWith('<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n')).toBe(true);
    expect(out).toContain('"name": "get_weather"');
    expect(out).toContain('\n\nWeather in Paris and Rome?<|eot_id|>');
    expect(out).toContain(
      '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city":"Paris"}}; {"name": "get_weather", "parameters": {"city":"Rome"}}<|eot_id|>' +
        '<|start_header_id|>ipython<|end_header_id|>\n\n20C<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n25C<|eot_id|>',
    );
    expect(out.match(/<\|begin_of_text\|>/g)).toHaveLength(1);
  });

  it('qwen3 renders tool calls and results in its own Hermes style', async () => {
    const t = await ChatTemplate.load(models.dir('qwen3'));
    const out = t.render(toolConversation, { tools: [weatherTool] });
    expect(out).toContain('<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>');
    expect(out).toContain('<|im_start|>user\n<tool_response>\n20C\n</tool_response>\n<tool_response>\n25C\n</tool_response><|im_end|>');
  });

  it('flattens OpenAI content parts into text', async () => {
    const t = await ChatTemplate.load(models.dir('qwen2'));
    const out = t.render([{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }]);
    expect(out).toContain('<|im_start|>user\na\nb<|im_end|>');
    expect(() => t.render([{ role: 'user', content: [{ type: 'image_url' }] }])).toThrow(ChatTemplateError);
  });

  it('a model without a template is a typed invalid_argument error', () => {
    let error: unknown;
    try {
      ChatTemplate.fromTokenizerConfig({ eos_token: '</s>' }, 'models/base');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ChatTemplateMissingError);
    expect((error as ChatTemplateMissingError).code).toBe('invalid_argument');
    expect((error as Error).message).toContain('models/base');
  });

  it('raise_exception in a template becomes a ChatTemplateError, and named template lists pick default', () => {
    const t = ChatTemplate.fromTokenizerConfig({
      chat_template: [
        { name: 'tool_use', template: 'tools' },
        { name: 'default', template: "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok" },
      ],
    });
    expect(t.render([{ role: 'user', content: 'x' }])).toBe('ok');
    expect(() => t.render([{ role: 'assistant', content: 'x' }])).toThrow(/first must be user/);
    expect(() => t.render([])).toThrow(ChatTemplateError);
  });
});

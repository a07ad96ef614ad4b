/**
 * The families' real chat templates, from the published tokenizer_config.json files, so the
 * frontend's template path is exercised with the same Jinja it meets in production. Qwen3's is
 * verbatim (tools and <think> reasoning). Qwen2's and Llama 3's are verbatim for plain chat and
 * gain their family's next release's tool calling (Qwen2.5, Llama 3.1), so every tool path
 * is testable offline while prompts without tools render byte for byte as before.
 */

/**
 * Qwen2-Instruct: ChatML with a default system prompt. Without tools it renders exactly as the
 * published Qwen2 template; with `tools`, tool calls or tool results it renders them as
 * Qwen2.5 does (Hermes style: a `<tools>` block in the system turn, `<tool_call>` JSON in
 * assistant turns, results as `<tool_response>` in a user turn).
 */
export const QWEN2_CHAT_TEMPLATE = `{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- elif messages[0]['role'] != 'system' %}
    {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'system' and loop.first and tools %}
    {%- elif message.role == 'assistant' and message.tool_calls %}
        {{- '<|im_start|>assistant' }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or (messages[loop.index0 - 1].role != 'tool') %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}`;

/**
 * Meta-Llama-3-Instruct: header tokens around each role, bos_token first, `trim` on content.
 * Without tools it renders exactly as the published Llama 3 template; with `tools`, tool calls
 * or tool results it renders them as Llama 3.1 does (JSON tool calling): an `Environment:
 * ipython` system turn, the tools listed in the first user turn, calls as
 * `{"name": ..., "parameters": ...}` (several joined by "; "), results in `ipython` turns.
 */
export const LLAMA3_CHAT_TEMPLATE = `{%- set loop_messages = messages %}
{%- if tools %}
    {%- if messages[0]['role'] == 'system' %}
        {%- set system_message = messages[0]['content'] | trim %}
        {%- set loop_messages = messages[1:] %}
    {%- else %}
        {%- set system_message = '' %}
    {%- endif %}
    {{- bos_token + '<|start_header_id|>system<|end_header_id|>\\n\\nEnvironment: ipython\\nCutting Knowledge Date: December 2023\\nToday Date: 26 Jul 2024\\n\\n' + system_message + '<|eot_id|>' }}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\\n\\n' }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.Do not use variables.\\n\\n' }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) + '\\n\\n' }}
    {%- endfor %}
    {%- if loop_messages | length > 0 and loop_messages[0]['role'] == 'user' %}
        {{- loop_messages[0]['content'] | trim }}
        {%- set loop_messages = loop_messages[1:] %}
    {%- endif %}
    {{- '<|eot_id|>' }}
{%- endif %}
{%- for message in loop_messages %}
    {%- if loop.index0 == 0 and not tools %}
        {{- bos_token }}
    {%- endif %}
    {%- if message['role'] == 'assistant' and message.tool_calls %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {%- if not loop.first %}
                {{- '; ' }}
            {%- endif %}
            {{- '{"name": "' + tool_call.name + '", "parameters": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}' }}
        {%- endfor %}
        {{- '<|eot_id|>' }}
    {%- elif message['role'] == 'tool' or message['role'] == 'ipython' %}
        {{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
    {%- else %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}`;

/** Qwen3: ChatML with tools, <think> reasoning blocks and the `enable_thinking` switch. */
export const QWEN3_CHAT_TEMPLATE = `{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}`;

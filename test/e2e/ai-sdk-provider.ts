/**
 * The Vercel AI SDK checks every provider pointed at Tandem must pass, whichever API it speaks
 * (OpenAI Responses, Anthropic Messages): a forced tool call the SDK validates and runs, and a
 * streamed text whose deltas join to the final text.
 */
import { generateText, streamText, tool, type LanguageModel } from 'ai';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';

/** The tool input the forcing grammar must produce: a capitalised city and a unit. */
export const WeatherInput = z.object({ city: z.string().regex(/^[A-Z][a-z]{1,11}$/), unit: z.enum(['c', 'f']) });

export function describeAiSdkProvider(title: string, model: () => LanguageModel): void {
  describe(title, () => {
    const common = { maxRetries: 0, temperature: 0.8, maxOutputTokens: 128 } as const;

    it("generateText with tools and toolChoice 'required': the SDK gets a valid call and runs it", async () => {
      const ran: unknown[] = [];
      const result = await generateText({
        ...common,
        model: model(),
        prompt: 'Weather in Bergen?',
        tools: { get_weather: tool({ description: 'Weather forecast for a city', inputSchema: WeatherInput, execute: async (input) => (ran.push(input), { tempC: 9 }) }) },
        toolChoice: 'required',
      });
      expect(result.finishReason).toBe('tool-calls');
      expect(result.toolCalls.length).toBeGreaterThanOrEqual(1);
      for (const call of result.toolCalls) expect(WeatherInput.safeParse(call.input).success, JSON.stringify(call.input)).toBe(true);
      expect(ran).toEqual(result.toolCalls.map((c) => c.input));
      expect(result.usage.inputTokens).toBeGreaterThan(0);
    });

    it('streamText: text deltas arrive and join to the final text', async () => {
      const result = streamText({ ...common, model: model(), prompt: 'Tell me something.', maxOutputTokens: 16 });
      let text = '';
      for await (const part of result.fullStream) {
        if (part.type === 'error') throw part.error;
        if (part.type === 'text-delta') text += part.text;
      }
      expect(text.length).toBeGreaterThan(0);
      expect(await result.text).toBe(text);
      expect(['stop', 'length']).toContain(await result.finishReason);
    });
  });
}

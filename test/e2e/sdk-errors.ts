/**
 * The error an `openai` SDK call failed with, for tests that expect a refusal: its APIError
 * (status, code, param, message), or a test failure when the call succeeded or failed otherwise.
 */
import OpenAI from 'openai';

export async function rejection(p: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await p;
  } catch (err) {
    if (err instanceof OpenAI.APIError) return err;
    throw err;
  }
  throw new Error('expected the request to fail');
}

/**
 * Who may load and unload adapters (frontend/http/auth.ts ADMIN_PATHS): with no key at all the
 * routes are open like every route; once any key is set they take only an admin key
 * (--admin-api-key), an inference key getting 401 "insufficient permissions"; admin keys also
 * run inference; admin keys alone leave inference open. Over HTTP the same with the built CLI
 * is in adapter-load-faults.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { ApiKeySet, checkAccess, type AccessPolicy } from '../../frontend/http/auth.js';

const LOAD = '/v1/load_lora_adapter';
const UNLOAD = '/v1/unload_lora_adapter';
const CHAT = '/v1/chat/completions';
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

function policy(keys: string[], admin: string[]): AccessPolicy {
  const set = keys.length > 0 ? new ApiKeySet(keys) : undefined;
  return { keys: () => set, metricsAuth: 'required', ...(admin.length > 0 ? { adminKeys: new ApiKeySet(admin) } : {}) };
}

describe('admin routes: LoRA load and unload', () => {
  it('no key configured: every route open, these too (as before)', () => {
    const p = policy([], []);
    for (const path of [LOAD, UNLOAD, CHAT]) expect(checkAccess(p, path, {})).toBeUndefined();
  });

  it('inference and admin keys: the admin routes take only the admin key; both keys run inference', () => {
    const p = policy(['sk-inf'], ['sk-admin']);
    for (const path of [LOAD, UNLOAD]) {
      expect(checkAccess(p, path, bearer('sk-admin'))).toBeUndefined();
      expect(checkAccess(p, path, bearer('sk-inf'))).toMatchObject({ code: 'invalid_api_key', status: 401, message: expect.stringMatching(/insufficient permissions.*--admin-api-key/) });
      expect(checkAccess(p, path, bearer('sk-wrong'))).toMatchObject({ code: 'invalid_api_key', message: 'Incorrect API key provided.' });
      expect(checkAccess(p, path, {})).toMatchObject({ code: 'invalid_api_key', message: expect.stringContaining("didn't provide") });
    }
    expect(checkAccess(p, CHAT, bearer('sk-inf'))).toBeUndefined();
    expect(checkAccess(p, CHAT, bearer('sk-admin'))).toBeUndefined();
    expect(checkAccess(p, CHAT, bearer('sk-wrong'))).toMatchObject({ code: 'invalid_api_key' });
  });

  it('inference keys without an admin key: no key may load adapters at run time', () => {
    const p = policy(['sk-inf'], []);
    expect(checkAccess(p, LOAD, bearer('sk-inf'))).toMatchObject({ code: 'invalid_api_key', message: expect.stringMatching(/start the frontend with --admin-api-key/) });
    expect(checkAccess(p, CHAT, bearer('sk-inf'))).toBeUndefined();
  });

  it('an admin key alone guards the admin routes and leaves inference open', () => {
    const p = policy([], ['sk-admin']);
    expect(checkAccess(p, LOAD, bearer('sk-admin'))).toBeUndefined();
    expect(checkAccess(p, LOAD, {})).toMatchObject({ code: 'invalid_api_key' });
    expect(checkAccess(p, CHAT, {})).toBeUndefined();
  });
});

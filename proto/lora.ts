/**
 * The worker's LoRA admin endpoint (`{ns}/{component}/lora_admin`): the frontend's
 * POST /v1/load_lora_adapter and /v1/unload_lora_adapter call it on every worker of the model.
 * One request, one response; errors cross as TandemError codes (config_invalid for a refused
 * adapter, not_found for unloading an unknown one).
 */
export const LORA_ADMIN_ENDPOINT = 'lora_admin';

export type LoraAdminRequest = { op: 'load'; name: string; path: string } | { op: 'unload'; name: string } | { op: 'list' };

export interface LoraAdminResponse {
  ok: true;
  loras: Array<{ name: string; loraId: number; path: string; rank: number }>;
}

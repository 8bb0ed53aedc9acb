/**
 * The shapes of the operator's admin answers the Health and Requests screens read (the admin contract, parts B and C). Placeholder until the routes' TypeBox schemas land: then these become Static<typeof …> of them.
 */

export interface HealthInstance {
  id: string;
  host: string;
  pid: number;
  started_at: number;
  seen_at: number;
  self: boolean;
}

export type BreakerState = 'closed' | 'open' | 'half-open';

export interface HealthNumbers {
  requests: number;
  failures: number;
  error_rate: number;
  p50_ms: number | null;
  p95_ms: number | null;
  ttft_p50_ms: number | null;
  ttft_p95_ms: number | null;
  in_flight: number;
}

export interface HealthDeployment extends HealthNumbers {
  model: string;
  deployment: string;
  provider: string;
  state: BreakerState;
  reason: string | null;
  rpm: { used: number; limit: number | null };
  tpm: { used: number; limit: number | null };
  instances: Array<HealthNumbers & { instance: string; state: BreakerState; rpm_used: number; tpm_used: number }>;
}

export interface Health {
  generated_at: number;
  window_seconds: number;
  instances: HealthInstance[];
  deployments: HealthDeployment[];
}

export interface RequestRow {
  created_at: number;
  request_id: string;
  user_id: string;
  org_id: string;
  key_id: string;
  model: string;
  deployment: string | null;
  operation: string;
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
  characters: number;
  audio_seconds: number;
  cost: number;
  status: number;
  latency_ms: number | null;
  ttft_ms: number | null;
  error: { code: string; message: string } | null;
}

export interface RequestList {
  start_time: number;
  end_time: number;
  list: RequestRow[];
  total: number;
  page: number;
  per_page: number;
}

export interface RequestDetail {
  request: RequestRow;
  timings: { received_at_ms: number; first_output_ms: number | null; engine_ms: number | null; total_ms: number };
  response: { id: string; input: unknown; output: unknown } | null;
}

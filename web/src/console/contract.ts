/**
 * The shapes of the operator's admin answers the Requests screen reads (the admin contract, part C). Placeholder until the routes' TypeBox schemas land: then these become Static<typeof …> of them.
 */

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

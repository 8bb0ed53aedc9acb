/**
 * The shapes of the operator's admin answers the Requests screen reads (the admin contract, part C). Placeholder until the routes' TypeBox schemas land: then these become Static<typeof …> of them.
 */

export interface RequestRow {
  id: string;
  request_id: string;
  created_at: number;
  user_id: string | null;
  org_id: string | null;
  key_id: string | null;
  model: string | null;
  deployment: string | null;
  operation: string;
  route: string | null;
  status: number;
  error: { code: string; message: string } | null;
  latency_ms: number | null;
  ttft_ms: number | null;
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
  characters: number;
  audio_seconds: number;
  cost: number;
  response_id: string | null;
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
  timings: { received_at_ms: number; first_output_ms: number | null; engine_ms: number | null; total_ms: number | null };
  response: { id: string; input: unknown; output: unknown } | null;
}

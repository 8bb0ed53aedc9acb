/**
 * A scripted OpenAI Realtime server (GA event set) for tests: node:http + ws on 127.0.0.1, a random port.
 *
 *   const up = await startRealtimeUpstream();                 // or startRealtimeUpstream({ audioDeltas: 5 })
 *   ... connect to `${up.wsUrl}/realtime?model=gpt-realtime`  (up.url is http://127.0.0.1:PORT/v1, a base_url)
 *   up.connections[0].received                                 // the client events it got, parsed, in order
 *   up.connections[0].authorization, .model, .url, .headers    // what the upgrade request carried
 *   up.open                                                    // TCP sockets open now (hanging upgrades included)
 *   up.configure({ refuse: { status: 503 } })                  // how the next connections (and responses) behave
 *   await up.close();
 *
 * What it answers, as OpenAI's GA Realtime API does (shapes: node_modules/openai/resources/realtime/realtime.d.ts):
 * - on connect: `session.created` with a GA session (type realtime, object realtime.session, id sess_..., model
 *   from ?model=, output_modalities ['audio'], audio.input/output formats audio/pcm 24 kHz, server_vad, voice
 *   `marin`, instructions, tools [], tool_choice auto, max_output_tokens inf, expires_at);
 * - `session.update` -> `session.updated` with the merged session (an update without `session.type` -> the error
 *   OpenAI gives: missing_required_parameter, param session.type);
 * - `input_audio_buffer.append` (base64 pcm16 accumulated), `.commit` -> `input_audio_buffer.committed` (item_id,
 *   previous_item_id) + `conversation.item.added` / `.done` (a user message with input_audio); an empty buffer ->
 *   error input_audio_buffer_commit_empty; `.clear` -> `input_audio_buffer.cleared`;
 * - `conversation.item.create` -> `conversation.item.added` / `.done` (the item with its id, status completed);
 * - `response.create` -> `response.created`, `response.output_item.added`, `conversation.item.added`,
 *   `response.content_part.added`, `audioDeltas` x (`response.output_audio.delta` (base64 pcm16 24 kHz mono, 100 ms
 *   of a 440 Hz tone each) + `response.output_audio_transcript.delta`), then `response.output_audio.done`,
 *   `response.output_audio_transcript.done`, `response.content_part.done`, `response.output_item.done`,
 *   `conversation.item.done`, `response.done` (status completed, usage below). Output modalities ['text'] (the
 *   session's or the response's): `response.output_text.delta` / `.done` instead of the audio and transcript.
 *   Usage (GA shape): input text_tokens = ceil(chars of instructions and text items / 4), audio_tokens = 10 per
 *   second of committed audio, cached_tokens 0; output audio_tokens = 10 per audio delta, text_tokens = the
 *   transcript deltas (1 each); input_tokens, output_tokens and total_tokens their sums. `usage` overrides it.
 * - `response.cancel` while a response runs -> it stops: `response.output_item.done` (status incomplete),
 *   `conversation.item.done`, `response.done` status cancelled (status_details client_cancelled); with none running ->
 *   error response_cancel_not_active;
 * - any other type -> an `error` event (invalid_request_error, invalid_value, param type) as OpenAI sends it; a
 *   frame that is not JSON -> error invalid_json. The session stays open.
 *
 * Options (startRealtimeUpstream(o), or up.configure(o), which replaces them; read when a connection or response starts):
 * - refuse: { status, body?, headers? }: the upgrade is answered with this HTTP status (body default: OpenAI's
 *   error JSON with `errorMessage`);
 * - requireKey: refuse (401, OpenAI's invalid_api_key body) an upgrade without `Authorization: Bearer <it>`;
 * - hangUpgrade: accept TCP, read the upgrade request, never answer it;
 * - silent: upgrade, then never send session.created (nor anything else; client events are still recorded);
 * - garbage: 'text' (not JSON) | 'binary' (a binary frame) | 'array' (JSON that is not an object): sent instead of
 *   session.created, or right after it with garbageAfterSession;
 * - resetAfterDeltas: n: the TCP socket is reset (RST) after the n-th audio delta of a response;
 * - closeAfterDeltas: { n, code, reason? }: a close frame with this code (1011...) after the n-th audio delta;
 * - holdAfterDeltas: n: a response stops after the n-th audio delta until response.cancel (or up.release());
 * - slowRead: the server stops reading each socket after the upgrade (the client's writes pile up: bufferedAmount);
 *   up.resumeReading() reads again;
 * - audioDeltas (default 3), transcript (default 'Hello there, friend.'), deltaDelayMs (default 0: all at once, but
 *   never more than 1 MiB waiting in the socket: a stalled reader holds the rest back),
 *   usage (response.done's usage instead of the counted one), instructions (the session's default).
 * Per connection (up.connections[i]): send(event) and sendRaw(data, binary?) send anything, close(code, reason)
 * and reset() end it; closed gives the close code the server saw (undefined while open).
 */
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { WebSocketServer, type WebSocket } from 'ws';

export interface RealtimeUpstreamOptions {
  refuse?: { status: number; body?: string; headers?: Record<string, string> };
  errorMessage?: string;
  requireKey?: string;
  hangUpgrade?: boolean;
  silent?: boolean;
  garbage?: 'text' | 'binary' | 'array';
  garbageAfterSession?: boolean;
  resetAfterDeltas?: number;
  closeAfterDeltas?: { n: number; code: number; reason?: string };
  holdAfterDeltas?: number;
  slowRead?: boolean;
  audioDeltas?: number;
  transcript?: string;
  deltaDelayMs?: number;
  usage?: Record<string, unknown>;
  instructions?: string;
}

export interface RealtimeUpstreamConnection {
  /** the upgrade request's path and query, e.g. /v1/realtime?model=gpt-realtime */
  url: string;
  model: string | null;
  authorization: string | undefined;
  headers: http.IncomingHttpHeaders;
  /** 'refused' | 'hanging' | 'open' | 'closed' */
  state: 'refused' | 'hanging' | 'open' | 'closed';
  /** the client events received, parsed (a frame that is not JSON: { unparsed: text }; binary: { binary: bytes }) */
  received: Array<Record<string, any>>;
  /** the close code the server saw, once closed (1006: no closing handshake) */
  closed?: number;
  /** the current session object (as session.created / session.updated send it) */
  session: Record<string, any>;
  /** bytes the server queued towards the client and has not sent yet (a client that stopped reading) */
  readonly bufferedAmount: number;
  send(event: Record<string, unknown>): void;
  sendRaw(data: string | Buffer, binary?: boolean): void;
  close(code?: number, reason?: string): void;
  /** a TCP reset, no close frame */
  reset(): void;
}

export interface RealtimeUpstream {
  /** http://127.0.0.1:PORT/v1 (a base_url) */
  url: string;
  /** ws://127.0.0.1:PORT/v1 */
  wsUrl: string;
  port: number;
  connections: RealtimeUpstreamConnection[];
  /** every client event of every connection, in arrival order */
  received: Array<Record<string, any>>;
  /** TCP sockets open now */
  readonly open: number;
  configure(o: RealtimeUpstreamOptions): void;
  /** a held response (holdAfterDeltas) goes on */
  release(): void;
  /** sockets paused by slowRead are read again */
  resumeReading(): void;
  /** forgets the recorded connections and events, and the options */
  reset(): void;
  close(): Promise<void>;
}

const id = (prefix: string) => `${prefix}_${randomBytes(8).toString('hex')}`;

/** 100 ms of a 440 Hz tone, pcm16 mono 24 kHz, as base64; `n` moves the phase on so deltas join up */
export function toneChunk(n: number, ms = 100): string {
  const samples = Math.round((24000 * ms) / 1000);
  const b = Buffer.alloc(samples * 2);
  for (let i = 0; i < samples; i++) b.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * 440 * (n * samples + i)) / 24000)), i * 2);
  return b.toString('base64');
}

const CLIENT_EVENTS = [
  'session.update',
  'input_audio_buffer.append',
  'input_audio_buffer.commit',
  'input_audio_buffer.clear',
  'conversation.item.create',
  'conversation.item.retrieve',
  'conversation.item.truncate',
  'conversation.item.delete',
  'response.create',
  'response.cancel',
  'output_audio_buffer.clear',
];

export async function startRealtimeUpstream(initial: RealtimeUpstreamOptions = {}): Promise<RealtimeUpstream> {
  let o: RealtimeUpstreamOptions = { ...initial };
  const sockets = new Set<Socket>();
  const paused = new Set<WebSocket>();
  const holds = new Set<() => void>();
  const connections: RealtimeUpstreamConnection[] = [];
  const received: Array<Record<string, any>> = [];
  const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 64 * 1024 * 1024 });
  const server = http.createServer((_req, res) => {
    res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'Not found', type: 'invalid_request_error' } }));
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });

  server.on('upgrade', (req: http.IncomingMessage, socket: Socket, head: Buffer) => {
    socket.on('error', () => {});
    const u = new URL(req.url ?? '/', 'http://x');
    const conn = newConnection(req, u);
    connections.push(conn);
    const opts = o;
    const auth = req.headers.authorization;
    if (opts.requireKey !== undefined && auth !== `Bearer ${opts.requireKey}`) {
      conn.state = 'refused';
      return refuseUpgrade(
        socket,
        401,
        JSON.stringify({
          error: {
            message: `Incorrect API key provided: ${auth?.slice(7, 12) ?? ''}***. You can find your API key at https://platform.openai.com/account/api-keys.`,
            type: 'invalid_request_error',
            param: null,
            code: 'invalid_api_key',
          },
        }),
      );
    }
    if (opts.refuse) {
      conn.state = 'refused';
      const body =
        opts.refuse.body ??
        JSON.stringify({ error: { message: opts.errorMessage ?? `refused with ${opts.refuse.status}`, type: 'invalid_request_error', param: null, code: null } });
      return refuseUpgrade(socket, opts.refuse.status, body, opts.refuse.headers);
    }
    if (u.pathname !== '/v1/realtime') {
      conn.state = 'refused';
      return refuseUpgrade(socket, 404, JSON.stringify({ error: { message: `Invalid URL (GET ${u.pathname})`, type: 'invalid_request_error', param: null, code: null } }));
    }
    if (opts.hangUpgrade) {
      conn.state = 'hanging';
      // a socket taken out of the HTTP server is half-open: the client's FIN must close it
      socket.once('end', () => socket.destroy());
      socket.once('close', () => (conn.state = 'closed'));
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => serve(ws, conn, opts));
  });

  function newConnection(req: http.IncomingMessage, u: URL): RealtimeUpstreamConnection {
    let ws: WebSocket | undefined;
    const conn: RealtimeUpstreamConnection & { attach(w: WebSocket): void } = {
      url: req.url ?? '',
      model: u.searchParams.get('model'),
      authorization: req.headers.authorization,
      headers: req.headers,
      state: 'open',
      received: [],
      session: {},
      attach(w) {
        ws = w;
      },
      get bufferedAmount() {
        return ws?.bufferedAmount ?? 0;
      },
      send(event) {
        if (ws?.readyState === 1) ws.send(JSON.stringify({ event_id: id('event'), ...event }));
      },
      sendRaw(data, binary = false) {
        if (ws?.readyState === 1) ws.send(data, { binary });
      },
      close(code = 1000, reason = '') {
        ws?.close(code, reason);
      },
      reset() {
        const s = (ws as unknown as { _socket?: Socket })?._socket;
        if (s && typeof s.resetAndDestroy === 'function') s.resetAndDestroy();
        else ws?.terminate();
      },
    };
    return conn;
  }

  function refuseUpgrade(socket: Socket, status: number, body: string, headers: Record<string, string> = {}): void {
    const extra = Object.entries(headers)
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('');
    const bytes = Buffer.from(body);
    socket.end(
      Buffer.concat([
        Buffer.from(
          `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? 'Error'}\r\ncontent-type: application/json\r\ncontent-length: ${bytes.length}\r\n${extra}connection: close\r\n\r\n`,
        ),
        bytes,
      ]),
    );
  }

  function serve(ws: WebSocket, conn: RealtimeUpstreamConnection, opts: RealtimeUpstreamOptions): void {
    (conn as unknown as { attach(w: WebSocket): void }).attach(ws);
    // the conversation: item ids in order, for previous_item_id
    const items: string[] = [];
    let audioBytes = 0;
    let committedAudioBytes = 0;
    let inputTextChars = 0;
    let responding: { cancel(): void } | undefined;
    let stopped = false;
    /** the held response's wake-up (holdAfterDeltas) */
    let release: (() => void) | undefined;
    ws.on('error', () => {});
    ws.on('close', (code) => {
      conn.closed = code;
      conn.state = 'closed';
      paused.delete(ws);
      stopped = true;
      const r = release;
      release = undefined;
      r?.();
    });
    if (opts.slowRead) {
      ws.pause();
      paused.add(ws);
    }
    const session: Record<string, any> = {
      type: 'realtime',
      object: 'realtime.session',
      id: id('sess'),
      model: conn.model ?? 'gpt-realtime',
      output_modalities: ['audio'],
      instructions: opts.instructions ?? 'Your knowledge cutoff is 2023-10. You are a helpful, witty, and friendly AI.',
      tools: [],
      tool_choice: 'auto',
      max_output_tokens: 'inf',
      tracing: null,
      truncation: 'auto',
      prompt: null,
      expires_at: Math.floor(Date.now() / 1000) + 3600,
      audio: {
        input: {
          format: { type: 'audio/pcm', rate: 24000 },
          transcription: null,
          noise_reduction: null,
          turn_detection: {
            type: 'server_vad',
            threshold: 0.5,
            prefix_padding_ms: 300,
            silence_duration_ms: 200,
            idle_timeout_ms: null,
            create_response: true,
            interrupt_response: true,
          },
        },
        output: { format: { type: 'audio/pcm', rate: 24000 }, voice: 'marin', speed: 1 },
      },
      include: null,
    };
    conn.session = session;
    const send = (e: Record<string, unknown>) => conn.send(e);
    const sendGarbage = () => {
      if (opts.garbage === 'binary') conn.sendRaw(Buffer.from([1, 2, 3, 4]), true);
      else if (opts.garbage === 'array') conn.sendRaw('[{"type":"session.created"}]');
      else conn.sendRaw('this is not json {');
    };
    if (opts.silent) {
      // records what comes, answers nothing
    } else if (opts.garbage && !opts.garbageAfterSession) sendGarbage();
    else {
      send({ type: 'session.created', session });
      if (opts.garbage) sendGarbage();
    }

    const last = () => items[items.length - 1] ?? null;
    const error = (type: string, code: string | null, message: string, param: string | null, eventId: unknown) =>
      send({ type: 'error', error: { type, code, message, param, event_id: typeof eventId === 'string' ? eventId : null } });

    ws.on('message', (data: Buffer, binary: boolean) => {
      let e: Record<string, any>;
      if (binary) e = { binary: Buffer.from(data) };
      else {
        try {
          e = JSON.parse(data.toString('utf8'));
        } catch {
          e = { unparsed: data.toString('utf8') };
        }
      }
      conn.received.push(e);
      received.push(e);
      if (opts.silent) return;
      if (e.unparsed !== undefined || e.binary !== undefined || typeof e !== 'object' || e === null) {
        return error(
          'invalid_request_error',
          'invalid_json',
          "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)",
          null,
          null,
        );
      }
      switch (e.type) {
        case 'session.update': {
          const s = e.session;
          if (!s || typeof s !== 'object') return error('invalid_request_error', 'missing_required_parameter', "Missing required parameter: 'session'.", 'session', e.event_id);
          if (s.type !== 'realtime') return error('invalid_request_error', 'missing_required_parameter', "Missing required parameter: 'session.type'.", 'session.type', e.event_id);
          for (const [k, v] of Object.entries(s)) {
            if (k === 'audio' && v && typeof v === 'object') {
              for (const dir of ['input', 'output'] as const) {
                const part = (v as Record<string, any>)[dir];
                if (part && typeof part === 'object') session.audio[dir] = { ...session.audio[dir], ...part };
              }
            } else session[k] = v;
          }
          return send({ type: 'session.updated', session });
        }
        case 'input_audio_buffer.append': {
          if (typeof e.audio !== 'string') return error('invalid_request_error', 'missing_required_parameter', "Missing required parameter: 'audio'.", 'audio', e.event_id);
          audioBytes += Buffer.from(e.audio, 'base64').length;
          return;
        }
        case 'input_audio_buffer.commit': {
          if (audioBytes < 4800) {
            return error(
              'invalid_request_error',
              'input_audio_buffer_commit_empty',
              `Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but buffer only has ${(audioBytes / 48).toFixed(2)}ms of audio.`,
              null,
              e.event_id,
            );
          }
          const itemId = id('item');
          const previous = last();
          items.push(itemId);
          committedAudioBytes += audioBytes;
          audioBytes = 0;
          send({ type: 'input_audio_buffer.committed', previous_item_id: previous, item_id: itemId });
          const item = { id: itemId, type: 'message', object: 'realtime.item', status: 'completed', role: 'user', content: [{ type: 'input_audio', transcript: null }] };
          send({ type: 'conversation.item.added', previous_item_id: previous, item });
          return send({ type: 'conversation.item.done', previous_item_id: previous, item });
        }
        case 'input_audio_buffer.clear':
          audioBytes = 0;
          return send({ type: 'input_audio_buffer.cleared' });
        case 'conversation.item.create': {
          const it = e.item;
          if (!it || typeof it !== 'object') return error('invalid_request_error', 'missing_required_parameter', "Missing required parameter: 'item'.", 'item', e.event_id);
          const item = { id: typeof it.id === 'string' ? it.id : id('item'), object: 'realtime.item', status: 'completed', ...it };
          for (const c of Array.isArray(it.content) ? it.content : []) if (typeof c?.text === 'string') inputTextChars += c.text.length;
          const previous = typeof e.previous_item_id === 'string' ? e.previous_item_id : last();
          items.push(item.id);
          send({ type: 'conversation.item.added', previous_item_id: previous, item });
          return send({ type: 'conversation.item.done', previous_item_id: previous, item });
        }
        case 'response.create': {
          if (responding) {
            return error(
              'invalid_request_error',
              'conversation_already_has_active_response',
              'Conversation already has an active response in progress. Wait until the response is finished before creating a new one.',
              null,
              e.event_id,
            );
          }
          void respond(e.response ?? {});
          return;
        }
        case 'response.cancel':
          if (!responding) return error('invalid_request_error', 'response_cancel_not_active', 'Cancellation failed: no active response found', null, e.event_id);
          responding.cancel();
          return;
        default:
          if (typeof e.type === 'string' && CLIENT_EVENTS.includes(e.type)) return; // known, not modelled: no answer
          return error(
            'invalid_request_error',
            'invalid_value',
            `Invalid value: '${String(e.type)}'. Supported values are: ${CLIENT_EVENTS.map((t) => `'${t}'`).join(', ')}.`,
            'type',
            e.event_id,
          );
      }
    });

    async function respond(params: Record<string, any>): Promise<void> {
      const cur = o; // deltas, failures: the options now (configure() between a connect and a response applies)
      const text = Array.isArray(params.output_modalities)
        ? params.output_modalities.includes('text') && !params.output_modalities.includes('audio')
        : session.output_modalities?.[0] === 'text';
      const n = cur.audioDeltas ?? 3;
      const transcript = cur.transcript ?? 'Hello there, friend.';
      const words = transcript.split(/(?<= )/);
      const pieces = Array.from({ length: n }, (_, i) => words.slice(Math.floor((i * words.length) / n), Math.floor(((i + 1) * words.length) / n)).join(''));
      const responseId = id('resp');
      const itemId = id('item');
      const previous = last();
      items.push(itemId);
      let cancelled = false;
      const wake = () => {
        const r = release;
        release = undefined;
        r?.();
      };
      responding = {
        cancel() {
          cancelled = true;
          wake();
        },
      };
      const format = session.audio.output.format;
      const voice = session.audio.output.voice;
      const modalities = text ? ['text'] : ['audio'];
      const base = {
        object: 'realtime.response',
        id: responseId,
        conversation_id: id('conv'),
        output_modalities: modalities,
        max_output_tokens: 'inf',
        audio: { output: { format, voice } },
        metadata: params.metadata ?? null,
      };
      send({ type: 'response.created', response: { ...base, status: 'in_progress', status_details: null, output: [], usage: null } });
      const item = { id: itemId, type: 'message', status: 'in_progress', role: 'assistant', content: [] as unknown[], object: 'realtime.item' };
      send({ type: 'response.output_item.added', response_id: responseId, output_index: 0, item });
      send({ type: 'conversation.item.added', previous_item_id: previous, item });
      const at = { response_id: responseId, item_id: itemId, output_index: 0, content_index: 0 };
      send({ type: 'response.content_part.added', ...at, part: text ? { type: 'text', text: '' } : { type: 'audio', transcript: '' } });
      let sent = 0;
      let said = '';
      for (let i = 0; i < n && !cancelled && !stopped; i++) {
        if (cur.deltaDelayMs) await new Promise((r) => setTimeout(r, cur.deltaDelayMs));
        if (cancelled || stopped) break;
        if (text) send({ type: 'response.output_text.delta', ...at, delta: pieces[i] });
        else {
          send({ type: 'response.output_audio.delta', ...at, delta: toneChunk(i) });
          send({ type: 'response.output_audio_transcript.delta', ...at, delta: pieces[i] });
        }
        said += pieces[i];
        sent++;
        // a reader that is behind makes the next deltas wait (as a server streaming as it generates): the events
        // are made as they are taken, so a long answer to a stalled reader does not pile up here
        while (conn.bufferedAmount > 1 << 20 && !cancelled && !stopped) await new Promise((r) => setTimeout(r, 5));
        if (cur.resetAfterDeltas === sent) {
          conn.reset();
          return;
        }
        if (cur.closeAfterDeltas?.n === sent) {
          conn.close(cur.closeAfterDeltas.code, cur.closeAfterDeltas.reason ?? '');
          return;
        }
        if (cur.holdAfterDeltas === sent && !cancelled) {
          await new Promise<void>((r) => {
            release = r;
            holds.add(r);
          });
        }
      }
      responding = undefined;
      if (stopped) return;
      const content = text ? [{ type: 'output_text', text: said }] : [{ type: 'output_audio', transcript: said }];
      if (!cancelled) {
        if (text) send({ type: 'response.output_text.done', ...at, text: said });
        else {
          send({ type: 'response.output_audio.done', ...at });
          send({ type: 'response.output_audio_transcript.done', ...at, transcript: said });
        }
        send({ type: 'response.content_part.done', ...at, part: text ? { type: 'text', text: said } : { type: 'audio', transcript: said } });
      }
      const doneItem = { ...item, status: cancelled ? 'incomplete' : 'completed', content };
      send({ type: 'response.output_item.done', response_id: responseId, output_index: 0, item: doneItem });
      send({ type: 'conversation.item.done', previous_item_id: previous, item: doneItem });
      const textTokens = Math.ceil(((typeof session.instructions === 'string' ? session.instructions.length : 0) + inputTextChars) / 4);
      const audioTokens = Math.round((committedAudioBytes / 48000) * 10);
      const outAudio = text ? 0 : sent * 10;
      const outText = sent;
      const usage = cur.usage ?? {
        total_tokens: textTokens + audioTokens + outAudio + outText,
        input_tokens: textTokens + audioTokens,
        output_tokens: outAudio + outText,
        input_token_details: {
          text_tokens: textTokens,
          audio_tokens: audioTokens,
          image_tokens: 0,
          cached_tokens: 0,
          cached_tokens_details: { text_tokens: 0, audio_tokens: 0, image_tokens: 0 },
        },
        output_token_details: { text_tokens: outText, audio_tokens: outAudio },
      };
      send({
        type: 'response.done',
        response: {
          ...base,
          status: cancelled ? 'cancelled' : 'completed',
          status_details: cancelled ? { type: 'cancelled', reason: 'client_cancelled' } : null,
          output: [doneItem],
          usage,
        },
      });
    }
  }

  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    wsUrl: `ws://127.0.0.1:${port}/v1`,
    port,
    connections,
    received,
    get open() {
      return sockets.size;
    },
    // replaces the options (it does not merge them)
    configure(next) {
      o = { ...next };
    },
    release() {
      for (const r of [...holds]) r();
      holds.clear();
    },
    resumeReading() {
      for (const ws of paused) ws.resume();
      paused.clear();
    },
    reset() {
      o = { ...initial };
      connections.length = 0;
      received.length = 0;
    },
    async close() {
      for (const s of sockets) s.destroy();
      wss.close();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

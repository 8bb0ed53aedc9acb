import { sql, type Kysely } from 'kysely';
import type { Migration } from 'kysely';

/**
 * Versioned migrations, applied in name order at start-up by Portico's own runner (./index.ts: migrate(), which
 * keeps its log in portico_migrations). Never edit a released one: add the next.
 */
export const migrations: Record<string, Migration> = {
  '0001_keys_usage': {
    async up(db: Kysely<any>) {
      await db.schema
        .createTable('settings')
        .addColumn('key', 'text', (c) => c.primaryKey())
        .addColumn('value', 'text', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('api_keys')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('kind', 'text', (c) => c.notNull().check(sql`kind in ('management', 'inference')`))
        .addColumn('user_id', 'text', (c) => c.notNull())
        .addColumn('org_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('description', 'text', (c) => c.notNull().defaultTo(''))
        .addColumn('status', 'text', (c) => c.notNull().check(sql`status in ('active', 'disabled', 'revoked')`))
        .addColumn('digest', 'text', (c) => c.notNull().unique())
        .addColumn('display_prefix', 'text', (c) => c.notNull())
        .addColumn('display_suffix', 'text', (c) => c.notNull())
        .addColumn('scopes', sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
        .addColumn('expires_at', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('last_used_at', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .addColumn('deleted_at', 'bigint')
        .addColumn('rpm_limit', 'integer')
        .addColumn('tpm_limit', 'integer')
        .execute();
      await db.schema
        .createIndex('api_keys_owner')
        .on('api_keys')
        .columns(['user_id', 'kind', 'org_id', 'status', 'created_at'])
        .where(sql.ref('deleted_at'), 'is', null)
        .execute();
      await db.schema
        .createTable('usage_records')
        .addColumn('id', 'bigserial', (c) => c.primaryKey())
        .addColumn('request_id', 'text', (c) => c.notNull())
        .addColumn('key_id', 'text', (c) => c.notNull())
        .addColumn('user_id', 'text', (c) => c.notNull())
        .addColumn('org_id', 'text', (c) => c.notNull())
        .addColumn('model', 'text', (c) => c.notNull())
        .addColumn('operation', 'text', (c) => c.notNull())
        .addColumn('input_tokens', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('output_tokens', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('cached_tokens', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('characters', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('audio_seconds', 'double precision', (c) => c.notNull().defaultTo(0))
        .addColumn('cost_micros', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('usage_user_time').on('usage_records').columns(['user_id', 'created_at']).execute();
      await db.schema.createIndex('usage_key_time').on('usage_records').columns(['key_id', 'created_at']).execute();
      await db.schema
        .createTable('credit_grants')
        .addColumn('id', 'bigserial', (c) => c.primaryKey())
        .addColumn('user_id', 'text', (c) => c.notNull())
        .addColumn('org_id', 'text', (c) => c.notNull())
        .addColumn('amount_micros', 'bigint', (c) => c.notNull())
        .addColumn('note', 'text', (c) => c.notNull().defaultTo(''))
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('credit_grants_user').on('credit_grants').columns(['user_id', 'org_id']).execute();
    },
  },
  '0002_responses': {
    async up(db: Kysely<any>) {
      await db.schema
        .createTable('responses')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('user_id', 'text', (c) => c.notNull())
        .addColumn('org_id', 'text', (c) => c.notNull())
        .addColumn('key_id', 'text', (c) => c.notNull())
        .addColumn('model', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('background', 'boolean', (c) => c.notNull().defaultTo(false))
        .addColumn('previous_response_id', 'text')
        .addColumn('object', 'jsonb', (c) => c.notNull())
        .addColumn('input_items', 'jsonb', (c) => c.notNull())
        /** the request as accepted (for background jobs any instance may run) */
        .addColumn('request', 'jsonb')
        /** background jobs: the instance running it and when it last said so */
        .addColumn('runner_id', 'text')
        .addColumn('heartbeat_at', 'bigint')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .addColumn('deleted_at', 'bigint')
        .execute();
      await db.schema.createIndex('responses_user').on('responses').columns(['user_id', 'created_at']).execute();
      await db.schema
        .createTable('response_events')
        .addColumn('response_id', 'text', (c) => c.notNull())
        .addColumn('seq', 'integer', (c) => c.notNull())
        .addColumn('event', 'jsonb', (c) => c.notNull())
        .addPrimaryKeyConstraint('response_events_pk', ['response_id', 'seq'])
        .execute();
    },
  },
  '0003_usage_record_id': {
    async up(db: Kysely<any>) {
      // records are shipped from a local journal and may be sent twice after a crash: the id makes that harmless
      await db.schema.alterTable('usage_records').addColumn('record_id', 'text').execute();
      await db.schema.createIndex('usage_records_record_id').on('usage_records').column('record_id').unique().execute();
    },
  },
  '0004_web_sessions': {
    async up(db: Kysely<any>) {
      // the web page's sessions (only a digest of the cookie's value is stored) and the used sign-in links
      await db.schema
        .createTable('web_sessions')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('user_id', 'text', (c) => c.notNull())
        .addColumn('org_roles', 'jsonb', (c) => c.notNull())
        .addColumn('csrf_token', 'text', (c) => c.notNull())
        .addColumn('method', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('expires_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('web_sessions_expires').on('web_sessions').column('expires_at').execute();
      await db.schema
        .createTable('web_sign_in_links')
        .addColumn('jti', 'text', (c) => c.primaryKey())
        .addColumn('user_id', 'text', (c) => c.notNull())
        .addColumn('used_at', 'bigint', (c) => c.notNull())
        .addColumn('expires_at', 'bigint', (c) => c.notNull())
        .execute();
    },
  },
  '0005_usage_spend_epoch': {
    async up(db: Kysely<any>) {
      // which running-spend epoch counted the record (budgets read the ledger only for the others)
      await db.schema.alterTable('usage_records').addColumn('spend_epoch', 'text').execute();
    },
  },
  '0006_key_order_and_org_admins': {
    async up(db: Kysely<any>) {
      // keys made in the same second list newest first exactly: the insertion order breaks the tie
      await db.schema.alterTable('api_keys').addColumn('seq', 'bigserial').execute();
      // whether the maker of an organization key is an administrator of that organization now, as the newest
      // token Portico saw says (updated_at: that token's iat); an org key works and is managed only while it is
      await db.schema
        .createTable('org_admins')
        .addColumn('org_id', 'text', (c) => c.notNull())
        .addColumn('user_id', 'text', (c) => c.notNull())
        .addColumn('is_admin', 'boolean', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('org_admins_pk', ['org_id', 'user_id'])
        .execute();
      await db.schema.createIndex('org_admins_user').on('org_admins').column('user_id').execute();
      // every existing org key was made by an administrator of its organization
      await sql`insert into org_admins (org_id, user_id, is_admin, updated_at)
        select distinct org_id, user_id, true, 0 from api_keys where org_id <> 'default'`.execute(db);
    },
  },
  '0007_usage_deployment': {
    async up(db: Kysely<any>) {
      // which deployment of the model served the request (a model may have several, see docs/models.md)
      await db.schema.alterTable('usage_records').addColumn('deployment', 'text').execute();
    },
  },
  '0008_background_in_progress': {
    async up(db: Kysely<any>) {
      // a background response waiting for a worker is in_progress to clients (the specification's status list has
      // no queued); the row's status column keeps `queued` as its job state. Stored objects and events written
      // before say queued: they are rewritten, and the response.queued event becomes response.in_progress (its
      // sequence number stays, so a replay has no gap)
      await sql`update responses set object = jsonb_set(object, '{status}', '"in_progress"') where object->>'status' = 'queued'`.execute(db);
      await sql`update response_events set event = jsonb_set(event, '{response,status}', '"in_progress"') where event->'response'->>'status' = 'queued'`.execute(db);
      await sql`update response_events set event = jsonb_set(event, '{type}', '"response.in_progress"') where event->>'type' = 'response.queued'`.execute(db);
    },
  },
  '0009_response_sizes': {
    async up(db: Kysely<any>) {
      // the bytes of a response's stored input items and object (their JSON text), written with them: a continuation
      // sums them along its chain to know what it would read before it reads any of it (RESPONSES_MAX_CHAIN_BYTES).
      // Rows stored before have none: they are measured in SQL when a chain reaches them
      await db.schema.alterTable('responses').addColumn('input_bytes', 'bigint').addColumn('object_bytes', 'bigint').execute();
    },
  },
  '0010_api_keys_seq': {
    async up(db: Kysely<any>) {
      // the key verifier reads the keys made since the last ones it saw (src/portal/keys/verifier.ts, catchUp)
      await db.schema.createIndex('api_keys_seq').on('api_keys').column('seq').execute();
    },
  },
  '0011_key_max_concurrency': {
    async up(db: Kysely<any>) {
      // a key's own limit of requests and open WebSockets at once per instance (null: KEY_MAX_CONCURRENCY)
      await db.schema.alterTable('api_keys').addColumn('max_concurrency', 'integer').execute();
    },
  },
  '0012_operators_audit': {
    async up(db: Kysely<any>) {
      // who operates the installation besides those a token's claim names (PORTICO_OPERATOR_CLAIM): added by
      // `portico operators add`, by another operator, or the first user of a fresh embedded install
      await db.schema
        .createTable('operators')
        .addColumn('user_id', 'text', (c) => c.primaryKey())
        .addColumn('source', 'text', (c) => c.notNull().check(sql`source in ('cli', 'api', 'first_user', 'claim')`))
        .addColumn('added_by', 'text', (c) => c.notNull().defaultTo(''))
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      // every change an operator makes (the admin API, the operator commands): who, what, when, before and after
      await db.schema
        .createTable('audit_log')
        .addColumn('id', 'bigserial', (c) => c.primaryKey())
        .addColumn('at', 'bigint', (c) => c.notNull())
        .addColumn('actor', 'text', (c) => c.notNull())
        .addColumn('actor_key_id', 'text')
        .addColumn('action', 'text', (c) => c.notNull())
        .addColumn('target', 'text', (c) => c.notNull())
        .addColumn('before', 'jsonb')
        .addColumn('after', 'jsonb')
        .addColumn('request_id', 'text')
        .execute();
      await db.schema.createIndex('audit_log_at').on('audit_log').columns(['at', 'id']).execute();
      await db.schema.createIndex('audit_log_actor').on('audit_log').columns(['actor', 'at']).execute();
      await db.schema.createIndex('audit_log_action').on('audit_log').columns(['action', 'at']).execute();
      // a session signed in through the identity provider keeps whether its ID token named an operator
      await db.schema
        .alterTable('web_sessions')
        .addColumn('operator', 'boolean', (c) => c.notNull().defaultTo(false))
        .execute();
      // an installation that already has users is not fresh: its next user to sign in does not become an operator
      await sql`insert into settings (key, value)
        select 'first_operator', '' where exists (select 1 from api_keys) or exists (select 1 from usage_records) or exists (select 1 from credit_grants)
        on conflict (key) do nothing`.execute(db);
    },
  },
  '0013_budgets': {
    async up(db: Kysely<any>) {
      // spending limits an operator sets per key, user or organization, for a period that resets (the admin API)
      await db.schema
        .createTable('budgets')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('scope', 'text', (c) => c.notNull().check(sql`scope in ('key', 'user', 'org')`))
        .addColumn('target', 'text', (c) => c.notNull())
        .addColumn('period', 'text', (c) => c.notNull().check(sql`period in ('daily', 'weekly', 'monthly')`))
        .addColumn('limit_micros', 'bigint', (c) => c.notNull())
        .addColumn('soft_micros', 'bigint')
        .addColumn('webhook_url', 'text')
        .addColumn('created_by', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .addUniqueConstraint('budgets_scope_target_period', ['scope', 'target', 'period'])
        .execute();
    },
  },
  '0014_stored_models': {
    async up(db: Kysely<any>) {
      // models and deployments an operator adds at run time (the admin API): the model-file entry without its
      // secrets, the secrets sealed apart (platform/secrets.ts), and whether it is served
      await db.schema
        .createTable('stored_models')
        .addColumn('name', 'text', (c) => c.primaryKey())
        .addColumn('entry', 'text', (c) => c.notNull())
        .addColumn('secrets', 'text', (c) => c.notNull().defaultTo('{}'))
        .addColumn('enabled', 'boolean', (c) => c.notNull().defaultTo(true))
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_by', 'text', (c) => c.notNull())
        .execute();
    },
  },
  '0015_request_log': {
    async up(db: Kysely<any>) {
      // one row per {base_url} request whose key was known, success or failure, written in batches off the request
      // path (src/platform/ops/request-log.ts) and pruned after PORTICO_REQUEST_LOG_DAYS; the admin API's requests
      await db.schema
        .createTable('request_log')
        .addColumn('seq', 'bigserial', (c) => c.primaryKey())
        .addColumn('request_id', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('received_at_ms', 'bigint', (c) => c.notNull())
        .addColumn('key_id', 'text')
        .addColumn('user_id', 'text')
        .addColumn('org_id', 'text')
        .addColumn('method', 'text', (c) => c.notNull())
        .addColumn('route', 'text', (c) => c.notNull())
        .addColumn('operation', 'text', (c) => c.notNull())
        .addColumn('model', 'text')
        .addColumn('deployment', 'text')
        .addColumn('status', 'integer', (c) => c.notNull())
        .addColumn('error_code', 'text')
        .addColumn('error_message', 'text')
        .addColumn('latency_ms', 'double precision', (c) => c.notNull())
        .addColumn('ttft_ms', 'double precision')
        .addColumn('engine_ms', 'double precision')
        .addColumn('input_tokens', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('output_tokens', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('characters', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('audio_seconds', 'double precision', (c) => c.notNull().defaultTo(0))
        .addColumn('cost_micros', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('response_id', 'text')
        .execute();
      // every index is paid for by every request's row (docs/performance.md): besides the key (appended to, and what
      // `portico migrate-data` pages by), the time range every list reads and the request ids (one request, a
      // prefix, the ledger's requests without a row); the other filters narrow within the time range
      await db.schema.createIndex('request_log_at').on('request_log').column('created_at').execute();
      await sql`create index request_log_request on request_log (request_id text_pattern_ops)`.execute(db);
      // an organization role an operator set (where roles are Portico's own: no identity provider); it wins over the
      // role a sign-in link or token carries for that organization (docs/api.md, "Organization roles")
      await db.schema
        .createTable('org_members')
        .addColumn('org_id', 'text', (c) => c.notNull())
        .addColumn('user_id', 'text', (c) => c.notNull())
        .addColumn('role', 'text', (c) => c.notNull().check(sql`role in ('admin', 'member')`))
        .addColumn('updated_by', 'text', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('org_members_pk', ['org_id', 'user_id'])
        .execute();
      await db.schema.createIndex('org_members_user').on('org_members').column('user_id').execute();
    },
  },
  '0016_output_audio_seconds': {
    async up(db: Kysely<any>) {
      // the seconds of audio a request produced, beside the seconds it took in (audio_seconds): a record that both
      // hears and speaks counts each in its own column. Rows written before produced none that was counted: 0
      await db.schema
        .alterTable('usage_records')
        .addColumn('output_audio_seconds', 'double precision', (c) => c.notNull().defaultTo(0))
        .execute();
      await db.schema
        .alterTable('request_log')
        .addColumn('output_audio_seconds', 'double precision', (c) => c.notNull().defaultTo(0))
        .execute();
    },
  },
  '0017_cache_write_tokens': {
    async up(db: Kysely<any>) {
      // the part of a record's input written to a prompt cache (priced at cache_write_input_per_million), beside the
      // part read from one (cached_tokens). Rows written before counted their writes as plain input: 0
      await db.schema
        .alterTable('usage_records')
        .addColumn('cache_write_tokens', 'bigint', (c) => c.notNull().defaultTo(0))
        .execute();
    },
  },
};

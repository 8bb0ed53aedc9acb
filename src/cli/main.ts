#!/usr/bin/env node
/**
 * The `portico` command. `serve` builds the whole runtime; every other command builds only what it needs
 * (the core, or less), does its one thing and exits: it never starts engines, queues, workers or sweeps, so it
 * can never take a background job. `--help` and `--version` work on every command and do nothing else; a
 * missing or bad value is a one-line error.
 */
import { readFileSync } from 'node:fs';
import cluster from 'node:cluster';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { ConfigError, loadConfig, type Config } from '../platform/config.js';
import { parseTtl, signToken } from '../platform/auth/jwt.js';
import { ModelConfigError } from '../models/config-error.js';
import { AppError } from '../platform/errors.js';
import { PRIVATE_UMASK } from '../platform/data-dir.js';
import { armWatchdog } from '../platform/ops/watchdog.js';
import { MICROS } from '../portal/usage/micros.js';
import type { Core } from '../compose/core.js';
import type { ModelsCommand } from '../models/pull/cli.js';
import { UsageError } from './usage-error.js';

const VERSION: string = (JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** set by a command that decides its own exit code (models) */
let commandExitCode = 0;

/** the largest grant accepted in one command, in credits */
const MAX_GRANT = 1_000_000_000_000;

function wholeNumber(name: string) {
  return (v: string): number | null => {
    if (v === 'default') return null;
    if (!/^\d{1,12}$/.test(v)) throw new InvalidArgumentError(`${name} must be a whole number (0 = unlimited) or "default"`);
    return Number(v);
  };
}

/** Credits as the ledger stores them: whole micro-credits, positive, bounded; the figure printed is the one stored. */
function parseCredits(v: string): number {
  if (!/^\d+(\.\d+)?$/.test(v.trim())) throw new InvalidArgumentError('the amount must be a positive number of credits, like 100 or 2.5');
  const n = Number(v);
  const micros = Math.round(n * MICROS);
  if (micros <= 0) throw new InvalidArgumentError(`the amount must be at least 0.000001 credits (one micro-credit); got ${v}`);
  if (n > MAX_GRANT) throw new InvalidArgumentError(`the amount must be at most ${MAX_GRANT} credits in one grant; got ${v}`);
  if (Math.abs(micros - n * MICROS) > 1e-6 * Math.max(1, n * MICROS))
    throw new InvalidArgumentError(`the amount has more than 6 decimals (the ledger counts micro-credits); got ${v}`);
  return micros / MICROS;
}

function identifier(name: string) {
  return (v: string): string => {
    if (v.trim() === '' || v.length > 256 || /[\u0000-\u001f\u007f]/.test(v)) throw new InvalidArgumentError(`${name} must be 1-256 printable characters`);
    return v;
  };
}

/** An argument that may not be empty (a shell variable that expanded to nothing). */
function nonEmpty(what: string) {
  return (v: string): string => {
    if (v.trim() === '') throw new InvalidArgumentError(what);
    return v;
  };
}

function ttl(v: string): number {
  try {
    return parseTtl(v);
  } catch (e) {
    throw new InvalidArgumentError((e as Error).message);
  }
}

/** Runs `fn` on the core and closes it, whatever happens. */
async function withCore<T>(fn: (core: Core) => Promise<T>): Promise<T> {
  const config = loadConfig();
  // loaded here, not at start: `token`, `--help` and `--version` need none of it
  const { createCore } = await import('../compose/core.js');
  const core = await createCore(config, { role: 'command' });
  try {
    return await fn(core);
  } finally {
    await core.close();
  }
}

/** A key id's shape, checked before anything is opened. */
function keyId(id: string): string {
  if (!/^(mkey|key)_[A-Za-z0-9_-]{1,64}$/.test(id)) throw new InvalidArgumentError(`"${id}" is not a key id (key_... for inference keys, mkey_... for Management API Keys)`);
  return id;
}

function keyService(core: Core, id: string) {
  return id.startsWith('mkey_') ? core.keys.management : core.keys.inference;
}

function buildCli(): Command {
  const program = new Command('portico')
    .description('Portico: self-hostable AI API platform (API-key portal, OpenAI-compatible endpoints)')
    .version(VERSION, '-v, --version')
    .showSuggestionAfterError()
    .configureHelp({ sortSubcommands: false })
    .addHelpText(
      'after',
      `
Examples:
  portico serve                                   start on PORT (8080) with embedded storage in DATA_DIR (./data)
  portico login --user alice [--org acme --admin] a single-use link that signs alice in to the web page
  portico token --user alice [--org acme --admin] a portal JWT for the key portal
  portico keys disable key_...                    operator-only: refuse a key at once on every instance
  portico keys limit key_... --rpm 60 --tpm 100000
  portico credits grant --user alice --amount 100 personal credits (or --org acme for the organization)
  portico operators add alice                     alice may use the admin API (/v1/admin) and the console
  portico operators list | portico operators rm alice
  portico models pull hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF   a small instruct model for the embedded engine
  portico models list | portico models rm NAME
  portico models reload                           the running server reads PORTICO_CONFIG again (also: SIGHUP)
  portico migrate [--dry-run]
  portico backup FILE [--force] | portico restore FILE   the embedded database, while it serves or not
  portico migrate-data --to postgres://...        move the embedded database to PostgreSQL

Every command takes --help and --version. Settings come from the environment (see the README).`,
    )
    .exitOverride();
  const sub = (name: string, description: string) => program.command(name).description(description).version(VERSION, '-v, --version').exitOverride();

  sub('serve', 'start the HTTP service (settings: PORT, HOST, DATA_DIR, DATABASE_URL, REDIS_URL, ... see the README)')
    .option('--workers <n>', 'processes sharing the port: a number or auto (one per core); more than 1 needs DATABASE_URL and REDIS_URL (default: WORKERS or 1)')
    .action(serve);

  sub('token', 'print a portal JWT signed with the configured secret')
    .requiredOption('--user <id>', 'the user id (sub)', identifier('--user'))
    .option('--org <org>', 'an organization the user belongs to', identifier('--org'))
    .option('--admin', 'the user is an administrator of --org', false)
    .option('--role <role>', 'the role in --org (default member)', identifier('--role'))
    .option('--ttl <duration>', 'lifetime, e.g. 30m, 1h, 7d', ttl, 3600)
    .action(async (o: { user: string; org?: string; admin: boolean; role?: string; ttl: number }) => {
      if ((o.admin || o.role) && !o.org) throw new UsageError(`${o.admin ? '--admin' : '--role'} needs --org ORG`);
      const config = loadConfig();
      if (!config.jwt.secret) throw new UsageError('tokens are verified with JWT_JWKS_URL; mint them at your identity provider');
      const max = config.jwt.maxAgeSeconds;
      if (max > 0 && o.ttl > max) throw new UsageError(`--ttl is longer than JWT_MAX_AGE_SECONDS (${max} s): the token would be refused before it expires`);
      const orgRoles: Record<string, string> = {};
      if (o.org) orgRoles[o.org] = o.admin ? config.jwt.adminRole : (o.role ?? 'member');
      const jwt = await signToken(config.jwt.secret, {
        userId: o.user,
        orgRoles,
        ttlSeconds: o.ttl,
        issuer: config.jwt.issuer,
        audience: config.jwt.audience,
        claim: config.jwt.orgRolesClaim,
      });
      process.stdout.write(jwt + '\n');
    });

  sub('login', 'print a single-use sign-in link to the web page (no identity provider needed)')
    .requiredOption('--user <id>', 'the user id', identifier('--user'))
    .option('--org <org>', 'an organization the user belongs to', identifier('--org'))
    .option('--admin', 'the user is an administrator of --org', false)
    .option('--ttl <duration>', 'how long the link works, e.g. 15m (at most 1h)', ttl, 900)
    .action(async (o: { user: string; org?: string; admin: boolean; ttl: number }) => {
      if (o.admin && !o.org) throw new UsageError('--admin needs --org ORG');
      const config = loadConfig();
      const { mintSignInLink } = await import('../web/link.js');
      const orgRoles: Record<string, string> = o.org ? { [o.org]: o.admin ? config.jwt.adminRole : 'member' } : {};
      let link;
      try {
        link = await mintSignInLink({ pepper: config.keyPepper, publicUrl: config.web.publicUrl, userId: o.user, orgRoles, ttlSeconds: o.ttl });
      } catch (e) {
        throw new UsageError((e as Error).message);
      }
      process.stdout.write(`${link.url}\n`);
      const within = o.ttl % 3600 === 0 ? `${o.ttl / 3600}h` : o.ttl % 60 === 0 ? `${o.ttl / 60}m` : `${o.ttl}s`;
      process.stderr.write(`Open it in a browser within ${within} to sign in as ${o.user}; it works once.\n`);
    });

  const keys = sub('keys', 'operator-only changes to any key (disabled keys are refused at once on every instance)');
  const keyCmd = (name: string, description: string) => keys.command(name).description(description).version(VERSION, '-v, --version').exitOverride();
  for (const action of ['disable', 'enable'] as const) {
    keyCmd(action, action === 'disable' ? 'set a key to disabled (its owner cannot lift it)' : 'set a disabled key back to active')
      .argument('<id>', 'key_... or mkey_...', keyId)
      .action((id: string) =>
        withCore(async (core) => {
          const svc = keyService(core, id);
          const { toRecord } = await import('../portal/keys/service.js');
          const prior = await core.keys.store.getById(svc.kind, id);
          const rec = await svc.setDisabled(id, action === 'disable');
          await core.audit.write({
            actor: 'cli',
            action: `key.${action}`,
            target: rec.id,
            before: prior ? { ...toRecord(prior), kind: prior.kind, user_id: prior.user_id } : null,
            after: { ...rec, kind: svc.kind, user_id: prior?.user_id },
          });
          console.log(`${rec.id}: ${rec.status}`);
        }),
      );
  }
  keyCmd('limit', "a key's own requests and tokens per minute (default: the configured RATE_LIMIT_RPM / RATE_LIMIT_TPM) and concurrency")
    .argument('<id>', 'key_... or mkey_...', keyId)
    .option('--rpm <n>', 'requests per minute (0 = unlimited, "default" = the configured one)', wholeNumber('--rpm'))
    .option('--tpm <n>', 'tokens per minute (0 = unlimited, "default" = the configured one)', wholeNumber('--tpm'))
    .option(
      '--concurrency <n>',
      'inference keys: requests and open WebSockets at once per instance (0 = unlimited, "default" = KEY_MAX_CONCURRENCY); alone, rpm and tpm are left as they are',
      wholeNumber('--concurrency'),
    )
    .action((id: string, o: { rpm?: number | null; tpm?: number | null; concurrency?: number | null }) =>
      withCore(async (core) => {
        const svc = keyService(core, id);
        // --concurrency alone changes only the concurrency; otherwise rpm and tpm are set as before (omitted: default)
        const limited = o.concurrency !== undefined ? await svc.setConcurrency(id, o.concurrency) : undefined;
        const row = o.rpm !== undefined || o.tpm !== undefined || !limited ? await svc.setLimits(id, o.rpm ?? null, o.tpm ?? null) : limited;
        const concurrency = row.kind === 'inference' ? `, concurrency ${row.max_concurrency ?? 'default'}` : '';
        console.log(`${row.id}: rpm ${row.rpm_limit ?? 'default'}, tpm ${row.tpm_limit ?? 'default'}${concurrency}`);
      }),
    );

  const credits = sub('credits', 'credits for the balance query and budgets');
  credits
    .command('grant')
    .description("grant credits to a user (personal credits) or to an organization (shared by its members' org keys)")
    .version(VERSION, '-v, --version')
    .exitOverride()
    .addOption(new Option('--user <id>', "a user's personal credits").argParser(identifier('--user')).conflicts('org'))
    .addOption(new Option('--org <org>', "an organization's credits").argParser(identifier('--org')))
    .requiredOption('--amount <credits>', 'a positive amount, at most 6 decimals', parseCredits)
    .option('--note <text>', 'a note kept with the grant', '')
    .action((o: { user?: string; org?: string; amount: number; note: string }) => {
      if (!o.user && !o.org) throw new UsageError('give --user ID (personal credits) or --org ORG (organization credits)');
      return withCore(async (core) => {
        const scope = o.user ? { orgId: 'default', userId: o.user } : { orgId: o.org! };
        const who = o.user ? { user_id: o.user } : { org_id: o.org! };
        const before = await core.usage.balance(scope);
        await core.usage.grant(o.user ?? '', o.user ? 'default' : o.org!, o.amount, o.note);
        const bal = await core.usage.balance(scope);
        await core.audit.write({
          actor: 'cli',
          action: 'credits.grant',
          target: o.user ? `user:${o.user}` : `org:${o.org}`,
          before: { ...who, ...before },
          after: { ...who, ...bal, amount: o.amount, note: o.note },
        });
        console.log(`granted ${o.amount} credits to ${o.user ? `user ${o.user}` : `organization ${o.org}`}; balance ${bal.balance}`);
      });
    });

  const operators = sub('operators', 'operators of the installation: they see every user and organization (the admin API, /v1/admin)');
  const operatorCmd = (name: string, description: string) => operators.command(name).description(description).version(VERSION, '-v, --version').exitOverride();
  operatorCmd('add', 'make a user an operator (the user id their tokens carry as sub)')
    .argument('<user>', 'the user id', identifier('USER'))
    .action((user: string) =>
      withCore(async (core) => {
        const row = await core.operators.add(user, 'cli', 'cli');
        if (!row) {
          console.log(`${user} is already an operator`);
          return;
        }
        await core.audit.write({
          actor: 'cli',
          action: 'operator.add',
          target: user,
          before: null,
          after: { user_id: user, source: row.source, added_by: row.added_by, created_at: Number(row.created_at) },
        });
        console.log(`${user} is an operator`);
      }),
    );
  operatorCmd('rm', "take a recorded operator's role away (their Management API Keys with the admin scope stop working at once)")
    .argument('<user>', 'the user id', identifier('USER'))
    .action((user: string) =>
      withCore(async (core) => {
        const row = await core.operators.remove(user);
        if (!row) throw new UsageError(`${user} is not a recorded operator (see portico operators list)`);
        await core.audit.write({
          actor: 'cli',
          action: 'operator.remove',
          target: user,
          before: { user_id: user, source: row.source, added_by: row.added_by, created_at: Number(row.created_at) },
          after: null,
        });
        console.log(`${user} is no longer an operator`);
      }),
    );
  operatorCmd('list', 'the recorded operators (a claim of the identity provider, PORTICO_OPERATOR_CLAIM, may make others operators too)').action(() =>
    withCore(async (core) => {
      const rows = await core.operators.list();
      if (rows.length === 0) {
        console.log('no operators recorded');
        return;
      }
      for (const r of rows) console.log(`${r.user_id}\t${r.source}${r.added_by ? ` (by ${r.added_by})` : ''}\t${new Date(Number(r.created_at) * 1000).toISOString()}`);
    }),
  );

  const models = sub('models', 'models for the embedded engines: pull from Hugging Face or a URL, list, remove (MODELS_DIR)').addHelpText(
    'after',
    '\nSettings: MODELS_DIR (default DATA_DIR/models), HF_TOKEN, PORTICO_HF_ENDPOINT (or HF_ENDPOINT)',
  );
  const modelsCmd = (name: string, description: string) => models.command(name).description(description).version(VERSION, '-v, --version').exitOverride();
  // parsed here only; the work and its output are the pull library's (src/models/pull/cli.ts), given typed options
  const runModels = async (cmd: ModelsCommand) => {
    const { modelsCommand } = await import('../models/pull/cli.js');
    commandExitCode = await modelsCommand(cmd);
  };
  modelsCmd('pull', 'download a GGUF (or whisper.cpp ggml) model; resumes, verifies, then serves it at once')
    .argument(
      '<ref>',
      'hf:<owner>/<repo>[:<quant>] | hf:<owner>/<repo>/<file> | whisper:<name> | https://...',
      nonEmpty('give a model reference, e.g. hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF'),
    )
    .option('--name <name>', 'the name clients send (default: derived from the file)')
    .addOption(new Option('--kind <kind>', 'what the GGUF is for').choices(['text', 'embedding']))
    .option('--sha256 <hex>', 'the expected SHA-256 (for URLs whose server gives none)')
    .addHelpText(
      'after',
      `
<ref>:
  hf:<owner>/<repo>[:<quant>]   the GGUF of that quantization (default Q4_K_M)
  hf:<owner>/<repo>/<file>      one file of a repository (.gguf, or a whisper.cpp ggml .bin)
  whisper:<name>                a whisper.cpp model (tiny, base.en, small, large-v3-turbo, ...)
  https://...                   a GGUF (or ggml) file anywhere
e.g. portico models pull hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF`,
    )
    .action((ref: string, o: { name?: string; kind?: 'text' | 'embedding'; sha256?: string }) => runModels({ command: 'pull', ref, name: o.name, kind: o.kind, sha256: o.sha256 }));
  modelsCmd('list', 'the pulled models: name, kind, size, file')
    .alias('ls')
    .option('--json', 'as JSON', false)
    .action((o: { json: boolean }) => runModels({ command: 'list', json: o.json }));
  modelsCmd('rm', 'remove a pulled model and its file (an alias: only the alias)')
    .alias('remove')
    .argument('<name>', 'a name from portico models list', nonEmpty('give a model name (see portico models list)'))
    .action((name: string) => runModels({ command: 'rm', name }));
  modelsCmd('reload', 'make the running server read the model file (PORTICO_CONFIG) again: checked whole, then applied; a refused file changes nothing')
    .addHelpText(
      'after',
      '\nReaches the server started with the same DATA_DIR (its control socket DATA_DIR/portico.sock); every worker reloads.\nExit status: 0 reloaded, 1 refused (the reason is printed) or no server running.',
    )
    .action(reloadCommand);

  const data = () => import('./data.js');
  sub('backup', 'copy the embedded database (DATA_DIR) and its generated secrets to one file, while the server runs or not')
    .argument('<file>', 'the backup file to write', nonEmpty('give the backup file to write, e.g. portico-backup.bin'))
    .option('--force', 'replace the file if it exists', false)
    .addHelpText(
      'after',
      '\nA running server on the same DATA_DIR makes the copy (through its control socket); otherwise the data directory is read here.\nDownloaded model files are not included. With DATABASE_URL set this prints the pg_dump command instead (exit 2).',
    )
    .action(async (file: string, o: { force: boolean }) => (await data()).backupCommand(file, o, VERSION));
  sub('restore', 'replace the embedded database (DATA_DIR) with a backup file; the server must be stopped')
    .argument('<file>', 'a file written by portico backup', nonEmpty('give the backup file to restore'))
    .addHelpText('after', '\nThe database it replaces is moved aside (DATA_DIR/before-restore-<time>), not deleted. The file is checked whole first: a bad one changes nothing.')
    .action(async (file: string) => (await data()).restoreCommand(file));
  sub('migrate-data', 'copy everything in the embedded database (DATA_DIR) into an empty PostgreSQL database, in one transaction')
    .requiredOption('--to <url>', 'the target: postgres://USER:PASSWORD@HOST:5432/DATABASE', nonEmpty('give --to postgres://...'))
    .addHelpText('after', '\nThe server on DATA_DIR must be stopped. Start Portico on the target with the same KEY_PEPPER and JWT_SECRET (or the same generated files).')
    .action(async (o: { to: string }) => (await data()).migrateDataCommand(o));

  sub('migrate', 'apply the database migrations and exit')
    .option('--dry-run', 'list the migrations that would run, change nothing', false)
    .action(async (o: { dryRun: boolean }) => {
      const config = loadConfig();
      const { dbOptionsOf, openDb } = await import('../platform/db/index.js');
      const db = await openDb(dbOptionsOf(config));
      try {
        if (o.dryRun) {
          const pending = await db.pending();
          console.log(pending.length ? `pending migrations: ${pending.join(', ')}` : 'no pending migrations');
        } else {
          const applied = await db.migrate();
          console.log(applied.length ? `migrations applied: ${applied.join(', ')}` : 'no pending migrations');
        }
      } finally {
        await db.close();
      }
    });
  return program;
}

type Reloaded = { ok: boolean; error?: string; added?: string[]; removed?: string[]; changed?: string[]; unchanged?: number; worker?: number };

/** What one process did with the model file, in one line. */
function reloadedLine(r: Reloaded): string {
  const parts = [
    r.added?.length ? `added ${r.added.join(', ')}` : '',
    r.changed?.length ? `changed ${r.changed.join(', ')}` : '',
    r.removed?.length ? `removed ${r.removed.join(', ')}` : '',
  ].filter(Boolean);
  return parts.length ? `model file reloaded: ${parts.join('; ')}; ${r.unchanged ?? 0} unchanged` : `model file reloaded: nothing changed (${r.unchanged ?? 0} models)`;
}

/** `portico models reload`: asks the server on this DATA_DIR through its control socket, prints what it did. */
async function reloadCommand(): Promise<void> {
  const { controlSocketPath, sendControl, ControlUnreachable } = await import('../platform/ops/control.js');
  const { dataDirOf } = await import('../platform/config.js');
  let answer: Reloaded & { workers?: Reloaded[] };
  try {
    answer = (await sendControl(controlSocketPath(dataDirOf()), 'reload-models', 90_000)) as typeof answer;
  } catch (e) {
    if (!(e instanceof ControlUnreachable)) throw e;
    process.stderr.write(`portico: ${e.message}\n`);
    commandExitCode = 1;
    return;
  }
  const each = answer.workers ?? [answer];
  for (const r of each) {
    const who = r.worker !== undefined ? `worker ${r.worker}: ` : '';
    if (r.ok) process.stdout.write(`${who}${reloadedLine(r)}\n`);
    else process.stderr.write(`portico: ${who}the model file was not reloaded: ${r.error ?? 'no reason given'}\n`);
  }
  if (!answer.ok || each.length === 0) {
    if (each.length === 0) process.stderr.write('portico: no worker answered\n');
    commandExitCode = 1;
  }
}

async function serve(o: { workers?: string } = {}): Promise<void> {
  if (o.workers !== undefined) process.env.WORKERS = o.workers;
  const config: Config = loadConfig();
  const workers = await import('../compose/workers.js');
  if (config.workers > 1 && cluster.isPrimary) {
    const why = workers.workersRefusal(config);
    if (why) throw new UsageError(why);
    const { createLogger } = await import('../platform/log.js');
    const code = await workers.runPrimary(config, createLogger(config.logLevel, undefined, config.logFormat), { exec: process.argv[1]!, args: ['serve'] });
    await workers.closePrimary();
    process.exit(code);
  }
  // SIGHUP reads the model file again (docs/models.md, "Changing the model file while serving"); without a
  // handler it would end the process, cutting every stream. One that comes while the server starts is applied
  // once it has started (the file it reads may be older than the signal).
  const hup: { reload?: (reason: string) => Promise<unknown>; whileStarting: boolean } = { whileStarting: false };
  let stopping = false;
  process.on('SIGHUP', () => {
    if (stopping) return;
    if (hup.reload) void hup.reload('SIGHUP');
    else hup.whileStarting = true;
  });
  // PGlite's WebAssembly compiles on its thread while the server's modules load (nothing touches DATA_DIR yet)
  if (!config.databaseUrl && config.pgliteThread) (await import('../platform/db/pglite-client.js')).PGliteWorkerClient.prestart();
  const { startServer } = await import('../compose/serve.js');
  let server;
  try {
    server = await startServer(config);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EADDRINUSE')
      throw new UsageError(`port ${config.port} on ${config.host} is in use by another program: stop it or set PORT to another port`);
    if ((e as NodeJS.ErrnoException).code === 'EACCES')
      throw new UsageError(`not allowed to listen on ${config.host}:${config.port}: choose a PORT above 1023 or run with the right privileges`);
    throw e;
  }
  const log = server.core.log;
  log.info(
    { url: server.url, database: server.core.db.driver, ...(server.metricsUrl ? { metrics: server.metricsUrl } : {}) },
    `Portico listening on ${server.url} (portal ${server.url}/v1/portal, API ${server.url}/v1, docs ${server.url}/docs)`,
  );
  // the hints once, not once per worker
  // the page's address: PUBLIC_URL, or the address it listens on (with PORT=0, the port it was given); the command
  // is told it too, so its link points at this server whatever PORT, HOST or PUBLIC_URL its own shell has
  const pageUrl = config.port === 0 && !process.env.PUBLIC_URL ? server.url : config.web.publicUrl;
  if ((config.workerId ?? 1) === 1)
    log.info(
      `Open the web page at ${pageUrl}/ and sign in with a link printed by: DATA_DIR=${config.dataDir} PUBLIC_URL=${pageUrl} portico login --user alice` +
        (config.web.oidc ? `, or with your identity provider (${config.web.oidc.issuer}) from the sign-in page` : ''),
    );
  if (config.jwt.secretGenerated) {
    log.info(
      `No JWT_SECRET or JWT_JWKS_URL is set: portal tokens are signed with a secret generated in ${config.dataDir}/jwt-secret. Mint one with: DATA_DIR=${config.dataDir} portico token --user alice`,
    );
  }
  const runtime = server.runtime;
  hup.reload = (reason) =>
    runtime.reloadModels(reason).catch((e: unknown) => {
      log.error({ err: (e as Error)?.message, reason }, 'model file reload failed; the previous configuration keeps serving');
      return { ok: false, error: (e as Error)?.message ?? String(e) };
    });
  if (hup.whileStarting) void hup.reload('SIGHUP');
  // `portico models reload`: through the control socket in DATA_DIR, or (a worker) through the primary
  let control: { close(): Promise<void> } | undefined;
  if (config.workerId) workers.reloadOnRequest(() => runtime.reloadModels('portico models reload'));
  else {
    const { controlSocketPath, startControlServer } = await import('../platform/ops/control.js');
    const c = await startControlServer(controlSocketPath(config.dataDir), async (command) =>
      command === 'reload-models'
        ? { ...(await runtime.reloadModels('portico models reload')) }
        : command === 'backup'
          ? (await import('./data.js')).answerBackup(server.core)
          : { ok: false, error: `unknown command ${JSON.stringify(command)}` },
    );
    if ('refused' in c) log.warn({ reason: c.refused }, '`portico models reload` cannot reach this server (no control socket); SIGHUP still reloads the model file');
    else control = c;
  }
  // Shutdown (docs/operations.md): running requests and streams get SHUTDOWN_GRACE_MS, then streams still running
  // are ended with an error event and their connections cut; closing storage gets 5 s more, then the process
  // exits whatever still hangs (an upstream, the job worker, Redis). A second signal exits at once. A thread of
  // its own kills the process 2 s after that deadline if the main thread is stuck (a blocked log write).
  const stop = async (signal: string) => {
    if (stopping) {
      if (signal === 'primary gone') return;
      log.warn({ signal }, 'second signal while shutting down: exiting now');
      process.exit(1);
    }
    stopping = true;
    const deadline = config.shutdownGraceMs + 5_000;
    armWatchdog(deadline + 2_000);
    setTimeout(() => {
      log.error({ deadlineMs: deadline }, 'shutdown did not finish by its deadline: exiting');
      process.exit(1);
    }, deadline).unref();
    log.info({ signal, graceMs: config.shutdownGraceMs }, 'shutting down');
    try {
      await control?.close();
      await server.close();
    } catch (e) {
      log.error({ err: (e as Error).message }, 'shutdown failed; exiting');
      process.exit(1);
    }
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
  workers.watchPrimary(() => void stop('primary gone'));
  await new Promise<never>(() => {});
}

async function main(argv: string[]): Promise<number> {
  // everything Portico writes (the database, the journal, secrets, pulled models) is its user's alone
  process.umask(PRIVATE_UMASK);
  const program = buildCli();
  if (argv.length === 0) {
    process.stdout.write(program.helpInformation());
    return 1;
  }
  try {
    await program.parseAsync(argv, { from: 'user' });
    return commandExitCode;
  } catch (e) {
    if (e instanceof CommanderError) {
      // --help and --version end here with code 0; a parse error was already printed in one line
      return e.exitCode === 0 ? 0 : 2;
    }
    if (e instanceof UsageError || e instanceof ConfigError || e instanceof ModelConfigError) {
      process.stderr.write(`portico: ${e.message}\n`);
      return 2;
    }
    if (e instanceof AppError) {
      // a refusal of the operation itself (unknown key, wrong state): its message, no stack
      process.stderr.write(`portico: ${e.message}\n`);
      return 1;
    }
    process.stderr.write(`portico: ${(e as Error)?.stack ?? e}\n`);
    return 1;
  }
}

main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
  // a command is done: nothing it opened may keep the process alive (serve never gets here)
  setTimeout(() => process.exit(code), 2_000).unref();
});

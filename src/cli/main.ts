#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig } from '../platform/config.js';
import { parseTtl, signToken } from '../platform/auth/jwt.js';
import { ModelConfigError } from '../models/config.js';
import { AppError } from '../platform/errors.js';
import { closeServices, createServices } from '../app.js';
import { startServer } from '../server.js';

const HELP = `portico: self-hostable AI API platform

Usage:
  portico serve                               start the HTTP service (PORT, HOST, DATA_DIR, DATABASE_URL, ...)
  portico token --user ID [--org ORG [--admin]] [--ttl 1h]
                                              print a portal JWT signed with the configured secret
  portico keys disable ID | keys enable ID    set a key's status to disabled / active (operator only)
  portico keys limit ID [--rpm N] [--tpm N]  per-key requests / tokens per minute (default: the configured ones; 0 = unlimited)
  portico credits grant --user ID [--org ORG] --amount N [--note TEXT]
                                              grant credits (for the balance query and budgets)
  portico migrate                             apply database migrations and exit
  portico help
`;

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case 'serve':
      return serve();
    case 'token':
      return token(rest);
    case 'keys':
      return keys(rest);
    case 'credits':
      return credits(rest);
    case 'migrate': {
      const s = await createServices(loadConfig());
      await closeServices(s);
      console.log('migrations applied');
      return 0;
    }
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(HELP);
      return cmd === undefined ? 1 : 0;
    default:
      process.stderr.write(`unknown command "${cmd}"\n\n${HELP}`);
      return 2;
  }
}

async function serve(): Promise<number> {
  const config = loadConfig();
  const server = await startServer(config);
  const log = server.app.log;
  log.info({ url: server.url, database: server.services.db.driver }, `Portico listening on ${server.url} (portal ${server.url}/v1/portal, API ${server.url}/v1, docs ${server.url}/docs)`);
  if (config.jwt.secretGenerated) {
    log.info(`No JWT_SECRET or JWT_JWKS_URL is set: portal tokens are signed with a secret generated in ${config.dataDir}/jwt-secret. Mint one with: DATA_DIR=${config.dataDir} npx portico token --user alice`);
  }
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down');
    const timer = setTimeout(() => process.exit(1), 30_000);
    timer.unref();
    await server.close();
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
  return new Promise<number>(() => {});
}

async function token(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: { user: { type: 'string' }, org: { type: 'string' }, admin: { type: 'boolean', default: false }, ttl: { type: 'string', default: '1h' }, role: { type: 'string' } },
  });
  if (!values.user) throw new UsageError('token needs --user ID');
  if (values.admin && !values.org) throw new UsageError('--admin needs --org ORG');
  let ttlSeconds: number;
  try {
    ttlSeconds = parseTtl(values.ttl!);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const config = loadConfig();
  if (!config.jwt.secret) throw new UsageError('tokens are verified with JWT_JWKS_URL; mint them at your identity provider');
  const orgRoles: Record<string, string> = {};
  if (values.org) orgRoles[values.org] = values.admin ? config.jwt.adminRole : values.role ?? 'member';
  const jwt = await signToken(config.jwt.secret, {
    userId: values.user,
    orgRoles,
    ttlSeconds,
    issuer: config.jwt.issuer,
    audience: config.jwt.audience,
    claim: config.jwt.orgRolesClaim,
  });
  process.stdout.write(jwt + '\n');
  return 0;
}

async function keys(args: string[]): Promise<number> {
  const [action, id] = args;
  if (action === 'limit' && id) {
    const { values } = parseArgs({ args: args.slice(2), options: { rpm: { type: 'string' }, tpm: { type: 'string' } } });
    const num = (v: string | undefined, name: string) => {
      if (v === undefined || v === 'default') return null;
      if (!/^\d+$/.test(v)) throw new UsageError(`--${name} must be a whole number (0 = unlimited) or "default"`);
      return Number(v);
    };
    const s = await createServices(loadConfig());
    try {
      const svc = id.startsWith('mkey_') ? s.managementKeys : s.inferenceKeys;
      const row = await svc.setLimits(id, num(values.rpm, 'rpm'), num(values.tpm, 'tpm'));
      console.log(`${row.id}: rpm ${row.rpm_limit ?? 'default'}, tpm ${row.tpm_limit ?? 'default'}`);
      return 0;
    } finally {
      await closeServices(s);
    }
  }
  if ((action !== 'disable' && action !== 'enable') || !id) throw new UsageError('usage: portico keys disable ID | portico keys enable ID | portico keys limit ID --rpm N --tpm N');
  const s = await createServices(loadConfig());
  try {
    const svc = id.startsWith('mkey_') ? s.managementKeys : s.inferenceKeys;
    const rec = await svc.setDisabled(id, action === 'disable');
    console.log(`${rec.id}: ${rec.status}`);
    return 0;
  } finally {
    await closeServices(s);
  }
}

async function credits(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  if (action !== 'grant') throw new UsageError('usage: portico credits grant --user ID [--org ORG] --amount N');
  const { values } = parseArgs({ args: rest, options: { user: { type: 'string' }, org: { type: 'string' }, amount: { type: 'string' }, note: { type: 'string', default: '' } } });
  const amount = Number(values.amount);
  if (!values.amount || !Number.isFinite(amount) || amount === 0) throw new UsageError('--amount must be a non-zero number');
  if (!values.user && !values.org) throw new UsageError('give --user ID (personal credits) and/or --org ORG');
  const s = await createServices(loadConfig());
  try {
    // org credits (user '') are shared by the org; personal credits belong to one user in the personal scope
    await s.usage.grant(values.user ?? '', values.org ?? 'default', amount, values.note);
    const bal = await s.usage.balance(values.user && !values.org ? { orgId: 'default', userId: values.user } : { orgId: values.org!, userId: values.user });
    console.log(`granted ${amount}; balance ${bal.balance}`);
    return 0;
  } finally {
    await closeServices(s);
  }
}

class UsageError extends Error {}

main(process.argv.slice(2)).then(
  (code) => {
    if (code !== undefined) process.exitCode = code;
  },
  (e) => {
    if (e instanceof UsageError || e instanceof ConfigError || e instanceof ModelConfigError || (e as any)?.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
      process.stderr.write(`portico: ${(e as Error).message}\n`);
      process.exitCode = 2;
    } else if (e instanceof AppError) {
      // a refusal of the operation itself (unknown key, wrong state): its message, no stack
      process.stderr.write(`portico: ${e.message}\n`);
      process.exitCode = 1;
    } else {
      process.stderr.write(`portico: ${(e as Error)?.stack ?? e}\n`);
      process.exitCode = 1;
    }
  },
);

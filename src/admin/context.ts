import type { FastifyRequest } from 'fastify';
import type { Actor, AdminService } from './service.js';
import type { ModelsAdmin } from './models.js';
import type { ClusterHealth } from './health.js';

/** What the operators' routes share (./routes/<endpoint>.ts). */
export interface AdminContext {
  service: AdminService;
  /** models and deployments at run time (/v1/admin/models) */
  models: ModelsAdmin;
  /** the deployments' health across the instances (GET /health) */
  health: Pick<ClusterHealth, 'read'>;
}

/** the operator the gate recognized, and the request, as the audit log records them */
export function actorOf(req: FastifyRequest): Actor {
  const op = req.operator!;
  return { userId: op.userId, keyId: op.keyId, requestId: req.id };
}

import { Type } from 'typebox';

/** GET /query/balance: credits granted minus cost used (the web page types it from here). */
export const BalanceSchema = Type.Object({
  granted: Type.Number(),
  used: Type.Number(),
  balance: Type.Number(),
  currency: Type.String(),
  billing_enabled: Type.Boolean({ description: 'false: requests are priced and recorded but never refused for the balance (BILLING_ENABLED), which may then be below zero' }),
});

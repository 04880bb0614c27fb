/**
 * RFC 9728 protected-resource metadata: how an MCP client that knows only toolgate's URL
 * finds the authorization server to sign in at. Public (it names no secret), before auth.
 */
import { Router } from 'express';
import type { OAuthResource } from '../auth/oauth.js';

export function protectedResourceRoutes(resource: OAuthResource): Router {
  const router = Router();
  const document = resource.resourceMetadata();
  router.get(resource.metadataPath, (_req, res) => {
    // Browser-based MCP clients read it cross-origin; it holds nothing per user.
    res.set({ 'Cache-Control': 'public, max-age=300', 'Access-Control-Allow-Origin': '*' });
    res.json(document);
  });
  return router;
}

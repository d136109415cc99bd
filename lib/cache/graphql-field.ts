// What the interceptor reads of a resolver call: GraphQL's own arguments (parent, arguments,
// context, info), with no need of @nestjs/graphql.
import type { ExecutionContext } from '@nestjs/common';
import { fingerprintOf } from './call-digest.js';
import type { RequestHeaders } from './http-request.js';

interface ResolveInfo {
  readonly fieldName?: string;
  readonly parentType?: { readonly name?: string };
  readonly operation?: { readonly operation?: string };
  /** The field's place in the answer: a root field's has no `prev`. */
  readonly path?: { readonly prev?: unknown };
}

type GraphqlContext = {
  readonly req?: { readonly headers?: RequestHeaders };
  readonly request?: { readonly headers?: RequestHeaders };
  readonly reply?: { readonly request?: { readonly headers?: RequestHeaders } };
};

/** A resolver call as the cache sees it. */
export interface FieldCall {
  /** `query`, `mutation` or `subscription`. */
  readonly operation: string | undefined;
  /** The field's path, arguments and parent, hashed; none for a parent that has no `id`. */
  readonly key: string | undefined;
  /** The request's headers (Apollo's `req`, Mercurius's `reply.request`), when the context has them. */
  readonly headers: RequestHeaders | undefined;
}

/** The parent as a normalized GraphQL cache knows it: its type and `id`; `''` at the root. */
function parentKeyOf(parent: unknown, info: ResolveInfo): string | undefined {
  if (info.path !== undefined && info.path.prev === undefined) return '';
  const id = (parent as { id?: unknown } | null | undefined)?.id;
  return typeof id === 'string' || typeof id === 'number'
    ? `${info.parentType?.name}:${id}`
    : undefined;
}

export function fieldOf(context: ExecutionContext): FieldCall {
  const [parent, args, graphql, info = {}] =
    context.getArgs<[unknown, unknown, GraphqlContext | undefined, ResolveInfo | undefined]>();
  const headers =
    graphql?.req?.headers ?? graphql?.request?.headers ?? graphql?.reply?.request?.headers;
  const parentKey = parentKeyOf(parent, info);
  const path = `${info.parentType?.name}.${info.fieldName}`;
  return {
    operation: info.operation?.operation,
    key: parentKey === undefined ? undefined : fingerprintOf('graphql', path, [parentKey, args]),
    headers,
  };
}

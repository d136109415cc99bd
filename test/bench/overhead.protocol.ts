// Shared by the decorator-overhead bench and its server process: the handler bodies it compares.

/** `empty` returns `{ id }`; `cached` reads `cache:item:<id>` and on a miss SETs it with a TTL. */
export type OverheadWork = 'empty' | 'cached';

/** TTL of the cached route's entries; every request has a new id, so every one is a miss. */
export const OVERHEAD_CACHE_TTL_SECONDS = 60;

// Every key a lock needs lives in the lock key's Redis Cluster slot, so one script may name them
// all: derived keys are `{T}` + rest, where the tag T hashes like the lock key. An untagged lock
// key is its own tag (`{buffer:lock:9a03}:result`); a tagged one keeps its tag and follows it
// (`{shop}{shop}9a03:result`); one with braces but no usable tag gets a brace-free tag of its slot
// (`{3kq}a{b:result`). The lock key can be read back from each, so lock keys share none.

export type LockKeyRole = 'result' | 'fence' | 'claim' | 'backoff';

const CLUSTER_SLOTS = 16384;

const CRC16_TABLE: readonly number[] = Array.from({ length: 256 }, (_, byte) => {
  let crc = byte << 8;
  for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : crc << 1;
  return crc & 0xffff;
});

// Not cluster-key-slot's (ioredis's): it hashes `{}x}` by `x`, where Redis hashes the whole key.
function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) crc = ((crc << 8) & 0xffff) ^ CRC16_TABLE[((crc >> 8) ^ byte) & 0xff]!;
  return crc;
}

/** The hash tag of `key` (without braces), or `undefined` when Redis hashes the whole key. */
export function hashTag(key: string): string | undefined {
  const open = key.indexOf('{');
  if (open < 0) return undefined;
  const close = key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : undefined;
}

/** The slot of `key`, as CLUSTER KEYSLOT computes it. */
export function keySlot(key: string): number {
  return crc16(Buffer.from(hashTag(key) ?? key, 'utf8')) % CLUSTER_SLOTS;
}

let slotTags: string[] | undefined;

// The first base-36 counter value of each slot; the table is built once, on first need.
function tagForSlot(slot: number): string {
  if (!slotTags) {
    const table: (string | undefined)[] = Array.from({ length: CLUSTER_SLOTS });
    let missing = CLUSTER_SLOTS;
    for (let n = 0; missing > 0; n++) {
      const tag = n.toString(36);
      const s = keySlot(tag);
      if (table[s] === undefined) {
        table[s] = tag;
        missing--;
      }
    }
    slotTags = table as string[];
  }
  return slotTags[slot]!;
}

function slotPrefix(lockKey: string): string {
  const tag = hashTag(lockKey);
  if (tag !== undefined) return `{${tag}}${lockKey}`;
  if (!lockKey.includes('{') && !lockKey.includes('}')) return `{${lockKey}}`;
  return `{${tagForSlot(keySlot(lockKey))}}${lockKey}`;
}

export const derivedKey = (lockKey: string, role: LockKeyRole): string =>
  `${slotPrefix(lockKey)}:${role}`;

/** Whether `key` ends in some lock key's slot prefix, maybe with a role: a derived or cache key. */
export function isSlotKey(key: string): boolean {
  const body = key.replace(/:(result|fence|claim|backoff)$/, '');
  for (let open = body.indexOf('{'); open >= 0; open = body.indexOf('{', open + 1)) {
    const rest = body.slice(open);
    const close = rest.indexOf('}');
    if (close < 2) continue;
    for (const lockKey of [rest.slice(1, close), rest.slice(close + 1)]) {
      if (lockKey !== '' && slotPrefix(lockKey) === rest) return true;
    }
  }
  return false;
}

/** `prefix`, then the lock's slot prefix or its derived key `role`. */
export const slotKey = (lockKey: string, prefix: string, role?: LockKeyRole): string =>
  prefix + (role === undefined ? slotPrefix(lockKey) : derivedKey(lockKey, role));

// A shard channel hashes like the key of its name, and channels and keys are apart in Redis.
export const releaseChannel = (lockKey: string): string => lockKey;

export const resultKey = (lockKey: string): string => derivedKey(lockKey, 'result');

export const fenceKey = (lockKey: string): string => derivedKey(lockKey, 'fence');

/**
 * Names the holder whose build began after every write of its key so far: a write deletes it, and
 * a release stores its entry only while it still names the holder (lost to eviction, a flush or a
 * restart, the entry is not stored either).
 */
export const claimKey = (lockKey: string): string => derivedKey(lockKey, 'claim');

/**
 * An entry's `key` (a lock's `slotKey` with `prefix`) and that lock's `claimKey`, made from the
 * entry's key with no parsing: a cache hit's lookup sends both.
 */
export const entryAndClaim = (key: string, prefix: string): { key: string; claim: string } => ({
  key,
  claim: `${key.slice(prefix.length)}:claim`,
});

/** Present while a failed refresh's back-off lasts: no worker refreshes the key before. */
export const backoffKey = (lockKey: string): string => derivedKey(lockKey, 'backoff');

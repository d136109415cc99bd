/**
 * The Redis key layout of one lock: the one place that says where everything a lock needs lives.
 *
 * Redis Cluster hashes a key by its hash tag (the text between the first `{` and the first `}`
 * after it, when that text is not empty) or else by the whole key. Every key and channel here is
 * `{T}` + rest, where the tag T hashes like the lock key, so it lands in the lock key's slot and a
 * Lua script that names them all in KEYS never meets CROSSSLOT:
 *
 * - lock key without braces (the default `buffer:lock:9a03…`): T is the lock key itself, and the
 *   rest is just the role: `{buffer:lock:9a03…}:result`. Redis hashes the untagged lock key by all
 *   of its text and the derived key by its tag, which is that same text: same CRC16, same slot;
 * - lock key with a hash tag (`{shop}9a03…`): T is that tag, and the lock key follows:
 *   `{shop}{shop}9a03…:result`;
 * - lock key with braces but no usable tag (`a{b…`, `x}y…`, `{}…`): the lock key cannot be a tag,
 *   so T is a short brace-free text with the lock key's slot, found by search once per slot:
 *   `{3kq}a{b…:result`. Only an unusual namespace leads here.
 *
 * The lock key can be read back from every derived key (T ends at the first `}`; the rest is empty
 * or the lock key), so two lock keys never share a derived key.
 */

/**
 * What a derived key is for; also its suffix.
 *
 * @example
 * ```ts
 * const role: LockKeyRole = 'result';
 * ```
 */
export type LockKeyRole = 'result' | 'fence';

/**
 * Number of hash slots in a Redis Cluster.
 *
 * @example
 * ```ts
 * keySlot('any key') < CLUSTER_SLOTS; // true
 * ```
 */
export const CLUSTER_SLOTS = 16384;

const CRC16_TABLE: readonly number[] = (() => {
  const table: number[] = [];
  for (let byte = 0; byte < 256; byte++) {
    let crc = byte << 8;
    for (let bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : crc << 1;
    table.push(crc & 0xffff);
  }
  return table;
})();

// Written here rather than taken from cluster-key-slot (ioredis's): that package hashes a key whose
// first tag is empty up to a later '}' (`{}x}` by `x`), where Redis hashes the whole key.
/** CRC16-CCITT (XMODEM), the checksum Redis Cluster uses for key slots. */
function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) crc = ((crc << 8) & 0xffff) ^ CRC16_TABLE[((crc >> 8) ^ byte) & 0xff]!;
  return crc;
}

/**
 * The hash tag of `key` (without braces), or `undefined` when Redis hashes the whole key.
 *
 * @example
 * ```ts
 * hashTag('{shop}9a03'); // 'shop'
 * hashTag('foo{}{bar}'); // undefined: the first tag is empty
 * ```
 */
export function hashTag(key: string): string | undefined {
  const open = key.indexOf('{');
  if (open < 0) return undefined;
  const close = key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : undefined;
}

/**
 * The Redis Cluster hash slot of `key`, computed as Redis does (same answer as `CLUSTER KEYSLOT`).
 *
 * @example
 * ```ts
 * keySlot('foo'); // 12182
 * keySlot('{foo}:result'); // 12182
 * ```
 */
export function keySlot(key: string): number {
  return crc16(Buffer.from(hashTag(key) ?? key, 'utf8')) % CLUSTER_SLOTS;
}

let slotTags: string[] | undefined;

/**
 * A brace-free tag for `slot`: the first base-36 counter value that hashes to it. The table of all
 * 16384 is built once, on first need (about 180 000 CRC16s of 1 to 4 characters).
 */
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

/**
 * The tag `{T}` and the text after it that, with a role or a prefix, make every derived key: any
 * key that starts with a brace-free prefix and goes on with it lands in the lock key's slot.
 *
 * @example
 * ```ts
 * slotPrefix('buffer:lock:9a03'); // '{buffer:lock:9a03}'
 * slotPrefix('{shop}9a03'); // '{shop}{shop}9a03'
 * slotPrefix('a{b'); // '{4q2}a{b': a brace-free tag of the same slot
 * ```
 */
export function slotPrefix(lockKey: string): string {
  const tag = hashTag(lockKey);
  if (tag !== undefined) return `{${tag}}${lockKey}`;
  if (!lockKey.includes('{') && !lockKey.includes('}')) return `{${lockKey}}`;
  return `{${tagForSlot(keySlot(lockKey))}}${lockKey}`;
}

/**
 * The key that holds `role` for the lock at `lockKey`,
 * always in the lock key's hash slot. Distinct lock keys never share a derived key.
 *
 * @example
 * ```ts
 * derivedKey('buffer:lock:9a03', 'result'); // '{buffer:lock:9a03}:result'
 * derivedKey('{shop}9a03', 'fence'); // '{shop}{shop}9a03:fence'
 * ```
 */
export function derivedKey(lockKey: string, role: LockKeyRole): string {
  return `${slotPrefix(lockKey)}:${role}`;
}

/**
 * The shard channel a release of `lockKey` publishes its wake-up on: the lock key itself
 * (channels and keys are apart in Redis, and a shard channel hashes like the key of its name, so
 * it is on the lock's shard and the release script has it already as KEYS[1]).
 *
 * @example
 * ```ts
 * releaseChannel('buffer:lock:9a03'); // 'buffer:lock:9a03'
 * ```
 */
/** A key in the lock's hash slot, after `prefix`: the slot key itself, or the derived key `role`. */
export function slotKey(lockKey: string, prefix: string, role?: LockKeyRole): string {
  return prefix + (role === undefined ? slotPrefix(lockKey) : derivedKey(lockKey, role));
}

export function releaseChannel(lockKey: string): string {
  return lockKey;
}

/**
 * The key a leader's serialized result is shared under (`share: true`).
 *
 * @example
 * ```ts
 * resultKey('buffer:lock:9a03'); // '{buffer:lock:9a03}:result'
 * ```
 */
export function resultKey(lockKey: string): string {
  return derivedKey(lockKey, 'result');
}

/**
 * The counter key that numbers the holders of `lockKey` when fencing is on.
 *
 * @example
 * ```ts
 * fenceKey('buffer:lock:9a03'); // '{buffer:lock:9a03}:fence'
 * ```
 */
export function fenceKey(lockKey: string): string {
  return derivedKey(lockKey, 'fence');
}

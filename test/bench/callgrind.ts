// Instruction counts with valgrind's callgrind: a measure of CPU work that does not move with
// the other load on a shared machine (time does: on this 2-core VM, by ±10–30 % between runs).
// A process runs under `valgrind --tool=callgrind --instr-atstart=no`, so that start-up and warm-up
// run uninstrumented; `callgrind_control` then zeroes the counters, switches counting on around
// the measured work, reads the totals of every thread (GC helpers included), and switches it off.
// User-space instructions only: the kernel's share (socket reads and writes) is not in them.
import { execFile, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';

/** Runs `callgrind_control <args> <pid>` and resolves to what it printed. */
function control(pid: number, ...args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('callgrind_control', [...args, String(pid)], (error, stdout) =>
      error ? reject(error) : resolve(stdout),
    );
  });
}

const runs = (command: string): Promise<boolean> =>
  new Promise((resolve) => execFile(command, ['--version'], (error) => resolve(!error)));

/** Whether valgrind and callgrind_control are installed. */
export function callgrindAvailable(): Promise<boolean> {
  return Promise.all([runs('valgrind'), runs('callgrind_control')]).then((all) =>
    all.every(Boolean),
  );
}

/** Starts `node <script> <args>` under callgrind with counting off. */
export function spawnUnderCallgrind(
  script: string,
  args: readonly string[],
  options: SpawnOptions,
): ChildProcess {
  return spawn(
    'valgrind',
    [
      '--tool=callgrind',
      '--instr-atstart=no',
      '--callgrind-out-file=/dev/null',
      process.execPath,
      script,
      ...args,
    ],
    options,
  );
}

/**
 * The instructions process `pid` (running under {@link spawnUnderCallgrind}) executes while
 * `work` runs: all threads, user space.
 */
export async function countInstructions(
  pid: number,
  work: () => Promise<unknown>,
): Promise<number> {
  // Totals can only be read while counting is on; the read costs the process a few thousand.
  await control(pid, '--instr=on');
  let printed: string;
  try {
    await control(pid, '--zero');
    await work();
    printed = await control(pid, '-e', 'Ir');
  } finally {
    await control(pid, '--instr=off');
  }
  // "  Totals:  Ir" then one "   Th N  1,234,567" line per thread.
  let total = 0;
  for (const match of printed.matchAll(/^\s*Th\s+\d+\s+([\d,]+)/gm)) {
    total += Number(match[1]!.replaceAll(',', ''));
  }
  if (total === 0) throw new Error(`callgrind_control printed no counts: ${printed}`);
  return total;
}

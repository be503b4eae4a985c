// The Python interpreter that the agreement tests run backend/loaderscope with: $PYTHON (scripts/test.sh
// sets it to the venv's), else .venv/bin/python. Without one the agreement tests are skipped on a
// developer's machine but fail in CI ($CI set) or when $PYTHON names a missing file: a CI run that
// silently compared nothing would pass while Python and JS disagree.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const PY = process.env.PYTHON || join(ROOT, '.venv', 'bin', 'python');

const required = Boolean(process.env.CI || process.env.PYTHON);

/** The `skip` option of a test that needs Python: false (run it) when Python is there or required. */
export const needsPython = existsSync(PY) || required ? false : `no Python at ${PY} (set $PYTHON)`;

/**
 * Run a Python script with backend/ on the path; returns its stdout parsed as JSON.
 * @param {string} script
 * @param {{args?: string[], input?: string}} [options]
 */
export function python(script, { args = [], input } = {}) {
  assert.ok(existsSync(PY), `no Python interpreter at ${PY}: set $PYTHON (scripts/test.sh does)`);
  const r = spawnSync(PY, ['-c', script, ...args], {
    input,
    encoding: 'utf8',
    cwd: ROOT,
    env: { ...process.env, PYTHONPATH: join(ROOT, 'backend') },
  });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

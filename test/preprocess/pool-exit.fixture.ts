/**
 * Child script for pool.test.ts: tokenizes once on a PreprocessPool thread and returns from main
 * without closing the pool. The process must exit on its own (threads are unref'd).
 */
import { PreprocessPool } from '../../frontend/preprocess/index.js';

const dir = process.argv[2]!;
const pool = new PreprocessPool({ threads: 2 });
const result = await pool.run({ tokenizerDir: dir, templateDir: dir }, { kind: 'text', text: 'the quick fox', addSpecialTokens: false }, 100);
process.stdout.write(`tokens ${result.type === 'tokens' ? result.ids.length : -1}\n`);

// Prints every column of a Parquet file as JSON, read by hyparquet: an independent reader that
// the tests compare ours against. Usage: node read_with_hyparquet.mjs <npm prefix> <file>
// Output: {"name": [value per row], ...}; lists are arrays, int64 values strings (no BigInt in
// JSON), non-finite floats the strings "NaN", "Infinity", "-Infinity".
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'

const [prefix, file] = process.argv.slice(2)
const require = createRequire(`${prefix}/node_modules/`)
const load = (name) => import(pathToFileURL(require.resolve(name)).href)
const { parquetReadObjects, asyncBufferFromFile } = await load('hyparquet')
const { compressors } = await load('hyparquet-compressors')

const rows = await parquetReadObjects({ file: await asyncBufferFromFile(file), compressors })
const columns = {}
for (const row of rows) {
  for (const [name, value] of Object.entries(row)) (columns[name] ??= []).push(value)
}
const plain = (key, value) => {
  if (typeof value === 'bigint') return value.toString()
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value)
  return value
}
process.stdout.write(JSON.stringify(columns, plain))

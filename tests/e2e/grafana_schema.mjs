// Validates Grafana dashboard JSON files against the `Dashboard` type that
// Grafana publishes in the npm package @grafana/schema
// (dist/types/raw/dashboard/x/types.gen.d.ts): every required member present,
// every member's value of its declared type (strings, numbers, booleans,
// literals, enum values, arrays, records, unions, nested interfaces).
// Members the type does not declare are allowed, as TypeScript allows them in
// a value that is not an object literal.
//
//   node grafana_schema.mjs <node_modules dir> <dashboard.json>...
// Prints one line per error (file, JSON path, what is wrong); exit 1 if any.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const [modules, ...files] = process.argv.slice(2);
if (!modules || files.length === 0) {
  console.error('usage: node grafana_schema.mjs <node_modules dir> <dashboard.json>...');
  process.exit(2);
}
const pkgDir = join(modules, '@grafana', 'schema');
const typesFile = join(pkgDir, 'dist', 'types', 'raw', 'dashboard', 'x', 'types.gen.d.ts');

// --- a parser for the subset of TypeScript declarations the file uses ---
function tokenize(text) {
  const src = text.replace(/\/\*[\s\S]*?\*\//g, ' ').replace(/\/\/[^\n]*/g, ' ');
  const re = /\s*(?:([A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*)|('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(-?\d+(?:\.\d+)?)|([{}()<>\[\];:?|,=&]))/y;
  const out = [];
  let m;
  re.lastIndex = 0;
  while (re.lastIndex < src.length && (m = re.exec(src))) {
    if (m[1]) out.push({ k: 'id', v: m[1] });
    else if (m[2]) out.push({ k: 'str', v: JSON.parse('"' + m[2].slice(1, -1).replace(/"/g, '\\"') + '"') });
    else if (m[3]) out.push({ k: 'num', v: Number(m[3]) });
    else if (m[4]) out.push({ k: 'p', v: m[4] });
    if (/^\s*$/.test(src.slice(re.lastIndex))) break;
  }
  if (re.lastIndex < src.length && !/^\s*$/.test(src.slice(re.lastIndex)))
    throw new Error(`cannot read ${typesFile} near: ${src.slice(re.lastIndex, re.lastIndex + 40)}`);
  return out;
}

function parse(tokens) {
  let i = 0;
  const peek = () => tokens[i];
  const is = (v) => tokens[i] && tokens[i].k === 'p' && tokens[i].v === v;
  const eat = (v) => {
    if (!is(v)) throw new Error(`expected '${v}' at token ${i} (${JSON.stringify(tokens[i])})`);
    i++;
  };
  const word = () => {
    const t = tokens[i++];
    if (!t || (t.k !== 'id' && t.k !== 'str')) throw new Error(`expected a name at token ${i - 1}`);
    return t.v;
  };
  function type() {
    if (is('|')) i++;
    const alts = [intersection()];
    while (is('|')) {
      i++;
      alts.push(intersection());
    }
    return alts.length === 1 ? alts[0] : { t: 'union', alts };
  }
  function intersection() {
    const parts = [postfix()];
    while (is('&')) {
      i++;
      parts.push(postfix());
    }
    return parts.length === 1 ? parts[0] : { t: 'all', parts };
  }
  function postfix() {
    let t = primary();
    while (is('[') && tokens[i + 1] && tokens[i + 1].v === ']') {
      i += 2;
      t = { t: 'array', of: t };
    }
    return t;
  }
  function members() {
    eat('{');
    const m = {};
    while (!is('}')) {
      const name = word();
      const optional = is('?');
      if (optional) i++;
      eat(':');
      m[name] = { type: type(), optional };
      if (is(';') || is(',')) i++;
    }
    eat('}');
    return { t: 'object', members: m };
  }
  function primary() {
    const t = peek();
    if (is('(')) {
      i++;
      const inner = type();
      eat(')');
      return inner;
    }
    if (is('{')) return members();
    if (t.k === 'str' || t.k === 'num') {
      i++;
      return { t: 'lit', v: t.v };
    }
    if (t.k === 'id') {
      i++;
      const args = [];
      if (is('<')) {
        i++;
        args.push(type());
        while (is(',')) {
          i++;
          args.push(type());
        }
        eat('>');
      }
      return { t: 'ref', name: t.v, args };
    }
    throw new Error(`unexpected token ${JSON.stringify(t)} at ${i}`);
  }
  const env = {};
  while (i < tokens.length) {
    const t = tokens[i];
    if (t.k === 'id' && (t.v === 'export' || t.v === 'declare')) {
      i++;
      continue;
    }
    if (t.k === 'id' && t.v === 'interface') {
      i++;
      const name = word();
      env[name] = members();
      continue;
    }
    if (t.k === 'id' && t.v === 'type') {
      i++;
      const name = word();
      eat('=');
      env[name] = type();
      eat(';');
      continue;
    }
    if (t.k === 'id' && t.v === 'enum') {
      i++;
      const name = word();
      eat('{');
      const values = {};
      while (!is('}')) {
        const member = word();
        eat('=');
        values[member] = tokens[i++].v;
        if (is(',')) i++;
      }
      eat('}');
      env[name] = { t: 'enum', values };
      continue;
    }
    // `export declare const x: T;` and anything else: skip the statement.
    while (i < tokens.length && !is(';')) {
      if (is('{')) {
        let depth = 0;
        do {
          if (is('{')) depth++;
          if (is('}')) depth--;
          i++;
        } while (depth > 0 && i < tokens.length);
        continue;
      }
      i++;
    }
    i++;
  }
  return env;
}

const env = parse(tokenize(readFileSync(typesFile, 'utf8')));
if (!env.Dashboard) throw new Error(`${typesFile} declares no Dashboard type`);

// --- the checker ---
const show = (v) => JSON.stringify(v)?.slice(0, 60);

function check(v, type, path, errs) {
  switch (type.t) {
    case 'union': {
      let best = null;
      for (const alt of type.alts) {
        const e = [];
        check(v, alt, path, e);
        if (e.length === 0) return;
        if (!best || e.length < best.length) best = e;
      }
      if (typeof v === 'object' && v !== null && best.every((e) => e.startsWith(path + '.')))
        errs.push(...best); // an object that almost fits: say what is wrong inside it
      else errs.push(`${path}: ${show(v)} is none of the allowed types`);
      return;
    }
    case 'all':
      for (const p of type.parts) check(v, p, path, errs);
      return;
    case 'array':
      if (!Array.isArray(v)) return void errs.push(`${path}: expected an array, got ${show(v)}`);
      v.forEach((x, k) => check(x, type.of, `${path}[${k}]`, errs));
      return;
    case 'object':
      if (typeof v !== 'object' || v === null || Array.isArray(v))
        return void errs.push(`${path}: expected an object, got ${show(v)}`);
      for (const [name, m] of Object.entries(type.members)) {
        if (!(name in v)) {
          if (!m.optional) errs.push(`${path}: required member '${name}' is missing`);
          continue;
        }
        if (v[name] === undefined && m.optional) continue;
        check(v[name], m.type, `${path}.${name}`, errs);
      }
      return;
    case 'lit':
      if (v !== type.v) errs.push(`${path}: expected ${show(type.v)}, got ${show(v)}`);
      return;
    case 'enum':
      if (!Object.values(type.values).includes(v))
        errs.push(`${path}: ${show(v)} is not one of ${Object.values(type.values).map(show).join(', ')}`);
      return;
    case 'ref':
      return checkRef(v, type, path, errs);
    default:
      throw new Error(`unknown type node ${type.t}`);
  }
}

function checkRef(v, type, path, errs) {
  const n = type.name;
  const prim = { string: 'string', number: 'number', boolean: 'boolean' }[n];
  if (prim) {
    if (typeof v !== prim || (prim === 'number' && !Number.isFinite(v)))
      errs.push(`${path}: expected a ${prim}, got ${show(v)}`);
    return;
  }
  if (n === 'null') return void (v !== null && errs.push(`${path}: expected null, got ${show(v)}`));
  if (n === 'unknown' || n === 'any') return;
  if (n === 'Array') return check(v, { t: 'array', of: type.args[0] }, path, errs);
  if (n === 'Record') {
    if (typeof v !== 'object' || v === null || Array.isArray(v))
      return void errs.push(`${path}: expected an object, got ${show(v)}`);
    for (const [k, x] of Object.entries(v)) check(x, type.args[1], `${path}.${k}`, errs);
    return;
  }
  const dot = n.indexOf('.');
  if (dot > 0) {
    const e = env[n.slice(0, dot)];
    if (!e || e.t !== 'enum') throw new Error(`unknown enum member ${n}`);
    return check(v, { t: 'lit', v: e.values[n.slice(dot + 1)] }, path, errs);
  }
  if (!env[n]) throw new Error(`${typesFile}: unknown type ${n}`);
  check(v, env[n], path, errs);
}

const version = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8')).version;
let failed = 0;
for (const f of files) {
  const errs = [];
  check(JSON.parse(readFileSync(f, 'utf8')), env.Dashboard, '$', errs);
  for (const e of errs) console.log(`${f}: ${e}`);
  console.log(`${errs.length ? 'FAIL' : 'ok  '} ${f}: ${errs.length} errors against Dashboard of @grafana/schema ${version}`);
  failed += errs.length;
}
process.exit(failed ? 1 : 0);

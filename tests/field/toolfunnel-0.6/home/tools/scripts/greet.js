#!/usr/bin/env node
'use strict';
// greet.js - field-fixture tool: reads TOOLFUNNEL_TOOL_ARGS, prints one JSON line.
const args = JSON.parse(process.env.TOOLFUNNEL_TOOL_ARGS || 'null') || {};
const who = typeof args.name === 'string' && args.name ? args.name : 'world';
process.stdout.write(JSON.stringify({ ok: true, greeting: 'hello, ' + who }) + '\n');

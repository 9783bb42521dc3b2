-- wrk script for bench/nginx_bench.py: one modern (2026-07-28, stateless) tools/call of the curated
-- fast_echo per request, with the headers and _meta the era requires; an answer that is not a
-- complete, non-error result counts as failed (printed by done()).
wrk.method = "POST"
wrk.headers["accept"] = "application/json, text/event-stream"
wrk.headers["content-type"] = "application/json"
wrk.headers["mcp-protocol-version"] = "2026-07-28"
wrk.headers["mcp-method"] = "tools/call"
wrk.headers["mcp-name"] = "fast_echo"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fast_echo",'
  .. '"arguments":{"text":"hello from tfunnel-bench"},"_meta":{'
  .. '"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
  .. '"io.modelcontextprotocol/clientCapabilities":{},'
  .. '"io.modelcontextprotocol/clientInfo":{"name":"tfunnel-bench","version":"1"}}}}'

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  failed = 0
end

function response(status, headers, body)
  if status ~= 200 or not body:find('"resultType":"complete"', 1, true) or body:find('"isError":true', 1, true) then
    failed = failed + 1
  end
end

function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do
    total = total + thread:get("failed")
  end
  io.write(string.format("failed %d\n", total))
end

// Playground (keys/playground/): chat, compare, surface check and "copy as code" through the real
// gateway at /v1/. No key in this page: the portal sets an HttpOnly cookie bound to this browser
// session (POST credential_url), and every gateway call sends X-Portal-Playground so the gateway
// accepts it. Answers are rendered from text nodes only (no innerHTML), so a model cannot inject
// markup. Texts come translated from the page's JSON config.
(function () {
  "use strict";
  var configNode = document.getElementById("playground-config");
  if (!configNode) return;
  var config = JSON.parse(configNode.textContent);
  var T = config.texts;
  var conversation = [];  // [{role, content}] of the chat tab
  var pendingImage = null;  // data: URL of the image to attach to the next message
  var controller = null;
  var models = [];

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      if (name === "text") node.textContent = attrs[name];
      else if (name === "className") node.className = attrs[name];
      else node.setAttribute(name, attrs[name]);
    });
    (children || []).forEach(function (child) {
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    });
    return node;
  }

  function csrfToken() {
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  // --- the credential ---------------------------------------------------------------------
  var refreshTimer = null;
  function getCredential() {
    return fetch(config.credential_url, {
      method: "POST",
      credentials: "same-origin",
      headers: {"X-CSRFToken": csrfToken()},
    }).then(function (resp) {
      if (!resp.ok) throw new Error(T.credential_failed);
      clearTimeout(refreshTimer);
      refreshTimer = setTimeout(getCredential, config.refresh_seconds * 1000);
      return resp.json();
    });
  }

  function gatewayHeaders(extra) {
    var headers = {"Content-Type": "application/json", "X-Portal-Playground": "1"};
    if (config.is_admin) headers["X-Portal-Debug"] = "route";
    if (config.channel) headers["X-Portal-Channel"] = String(config.channel.id);
    Object.keys(extra || {}).forEach(function (k) { headers[k] = extra[k]; });
    return headers;
  }

  // A gateway call; a refused credential (expired while the tab slept) is renewed once.
  function gateway(path, options, retried) {
    var init = {
      method: options.body ? "POST" : "GET",
      credentials: "same-origin",
      headers: gatewayHeaders(options.headers),
      body: options.body ? JSON.stringify(options.body) : undefined,
      signal: options.signal,
    };
    return fetch("/v1" + path, init).then(function (resp) {
      if (resp.status === 401 && !retried) {
        return resp.clone().json().catch(function () { return {}; }).then(function (data) {
          var code = (data.error && data.error.code) || "";
          if (code.indexOf("playground") < 0) return resp;
          return getCredential().then(function () { return gateway(path, options, true); });
        });
      }
      return resp;
    });
  }

  // --- Markdown, safely: text nodes and a few elements, never HTML from the model ----------
  function inline(text, parent) {
    var pattern = /(`[^`\n]+`|\*\*[^*\n]+\*\*|\*[^*\n]+\*)/g;
    var last = 0;
    var match;
    while ((match = pattern.exec(text)) !== null) {
      if (match.index > last) parent.appendChild(document.createTextNode(text.slice(last, match.index)));
      var token = match[0];
      if (token[0] === "`") parent.appendChild(el("code", {text: token.slice(1, -1)}));
      else if (token.slice(0, 2) === "**") parent.appendChild(el("strong", {text: token.slice(2, -2)}));
      else parent.appendChild(el("em", {text: token.slice(1, -1)}));
      last = match.index + token.length;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  function block(text, parent) {
    var lines = text.split("\n");
    var list = null;
    var para = [];
    function flush() {
      if (para.length) {
        var p = el("p");
        para.forEach(function (line, i) {
          if (i) p.appendChild(el("br"));
          inline(line, p);
        });
        parent.appendChild(p);
        para = [];
      }
    }
    lines.forEach(function (line) {
      var heading = line.match(/^(#{1,6})\s+(.*)$/);
      var item = line.match(/^\s*(?:[-*+]|\d+[.)])\s+(.*)$/);
      if (heading) {
        flush(); list = null;
        var h = el("h" + Math.min(6, heading[1].length + 2));
        inline(heading[2], h);
        parent.appendChild(h);
      } else if (item) {
        flush();
        if (!list) { list = el(/^\s*\d/.test(line) ? "ol" : "ul"); parent.appendChild(list); }
        var li = el("li");
        inline(item[1], li);
        list.appendChild(li);
      } else if (!line.trim()) {
        flush(); list = null;
      } else {
        list = null;
        para.push(line);
      }
    });
    flush();
  }

  function renderMarkdown(text, target) {
    target.replaceChildren();
    var parts = text.split(/^```/m);
    parts.forEach(function (part, i) {
      if (i % 2 === 0) { block(part, target); return; }
      var newline = part.indexOf("\n");
      var lang = newline >= 0 ? part.slice(0, newline).trim() : "";
      var code = el("code", {text: newline >= 0 ? part.slice(newline + 1).replace(/\n$/, "") : part});
      if (lang) code.setAttribute("data-lang", lang);
      target.appendChild(el("pre", {}, [code]));
    });
  }

  window.PortalMarkdown = {render: renderMarkdown};  // for the browser test of its safety

  // --- SSE ------------------------------------------------------------------------------------
  // Reads an SSE body, calling onEvent(object) for each `data:` JSON event; resolves at the end.
  function readEvents(resp, onEvent) {
    var reader = resp.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    function handle(raw) {
      var data = raw.split(/\r?\n/).filter(function (l) { return l.indexOf("data:") === 0; })
        .map(function (l) { return l.slice(5).replace(/^ /, ""); }).join("\n");
      if (!data || data === "[DONE]") return;
      try { onEvent(JSON.parse(data)); } catch (e) { if (e instanceof SyntaxError) return; throw e; }
    }
    function pump() {
      return reader.read().then(function (step) {
        if (step.done) { if (buffer.trim()) handle(buffer); return; }
        buffer += decoder.decode(step.value, {stream: true});
        var parts = buffer.split(/\r?\n\r?\n/);
        buffer = parts.pop();
        parts.forEach(handle);
        return pump();
      });
    }
    return pump();
  }

  function errorOf(data, status) {
    var e = (data && data.error) || {};
    return {
      status: status,
      message: e.message || (typeof data === "string" ? data : JSON.stringify(data)),
      code: e.code || e.type || "",
      type: e.type || "",
    };
  }

  // What an error means, in the reader's language (by its code, else its type, else a general
  // sentence; the page's texts). The gateway's own English text stays as the detail.
  function meaning(error) {
    var known = config.errors || {};
    return known[error.code] || known[error.type] || T.error_other;
  }

  // --- one streamed Chat Completions call, rendered into `box` -------------------------------
  function settings() {
    var body = {};
    var t = $("pg-temperature").value, m = $("pg-max-tokens").value, p = $("pg-top-p").value, s = $("pg-stop").value;
    if (t !== "") body.temperature = Number(t);
    if (m !== "") body.max_tokens = Number(m);
    if (p !== "") body.top_p = Number(p);
    if (s.trim()) body.stop = s.split(",").map(function (x) { return x.trim(); }).filter(Boolean).slice(0, 4);
    return body;
  }

  function withSystem(messages) {
    var system = $("pg-system").value.trim();
    return system ? [{role: "system", content: system}].concat(messages) : messages.slice();
  }

  function chatBody(model, messages) {
    var body = {model: model, messages: withSystem(messages), stream: true, stream_options: {include_usage: true}};
    var extra = settings();
    Object.keys(extra).forEach(function (k) { body[k] = extra[k]; });
    return body;
  }

  function streamChat(model, messages, box, signal) {
    var answer = el("div", {className: "pg-answer", "data-state": "waiting", text: T.thinking});
    var metrics = el("dl", {className: "pg-metrics"});
    box.appendChild(answer);
    box.appendChild(metrics);
    var started = performance.now();
    var result = {text: "", usage: null, ttft: null, error: null, requestId: "", route: "", replica: ""};
    return gateway("/chat/completions", {body: chatBody(model, messages), signal: signal}).then(function (resp) {
      result.requestId = resp.headers.get("x-request-id") || "";
      result.route = resp.headers.get("x-portal-route") || "";
      result.replica = resp.headers.get("x-portal-replica") || "";
      result.status = resp.status;
      if (!resp.ok) {
        return resp.text().then(function (raw) {
          var data; try { data = JSON.parse(raw); } catch (e) { data = raw; }
          result.error = errorOf(data, resp.status);
        });
      }
      answer.setAttribute("data-state", "streaming");
      return readEvents(resp, function (event) {
        if (event.error) { result.error = errorOf(event, resp.status); return; }
        if (event.usage) result.usage = event.usage;
        (event.choices || []).forEach(function (choice) {
          var delta = (choice.delta && choice.delta.content) || "";
          if (!delta) return;
          if (result.ttft === null) result.ttft = performance.now() - started;
          result.text += delta;
          renderMarkdown(result.text, answer);
        });
      });
    }).catch(function (err) {
      // Stopped by the reader: the meaning says so; the browser's own English reason adds nothing.
      if (err.name === "AbortError") result.error = {status: 0, message: "", code: "aborted", type: ""};
      else result.error = {status: 0, message: String(err.message || err), code: "network", type: ""};
    }).then(function () {
      result.elapsed = performance.now() - started;
      answer.setAttribute("data-state", result.error ? "error" : "done");
      if (!result.text && !result.error) answer.textContent = "";
      if (result.error) {
        var summary = meaning(result.error);
        var err = el("div", {className: "pg-error", role: "alert"}, [
          el("strong", {text: T.error + " " + (result.error.status || "") + " "}),
          el("span", {className: "pg-error-meaning", text: summary}),
          el("small", {className: "pg-error-detail"}, [
            el("code", {text: result.error.code || ""}),
            document.createTextNode(" " + result.error.message),
          ]),
        ]);
        if (!result.text) answer.replaceChildren(err); else answer.appendChild(err);
      }
      showMetrics(result, metrics);
      return result;
    });
  }

  function metric(list, name, value, cls) {
    if (value === null || value === undefined || value === "") return;
    list.appendChild(el("dt", {text: name}));
    list.appendChild(el("dd", {text: String(value), className: cls || ""}));
  }

  function showMetrics(result, list) {
    var usage = result.usage || {};
    var details = usage.prompt_tokens_details || {};
    var generating = result.ttft === null ? null : (result.elapsed - result.ttft) / 1000;
    metric(list, T.ttft, result.ttft === null ? null : Math.round(result.ttft) + " ms", "pg-ttft");
    if (usage.completion_tokens && generating !== null) {
      // Over the generation after the first token; a burst too short to time is taken over the whole call.
      var seconds = generating >= 0.05 ? generating : result.elapsed / 1000;
      metric(list, T.speed, (usage.completion_tokens / seconds).toFixed(1), "pg-speed");
    }
    metric(list, T.prompt, usage.prompt_tokens, "pg-prompt-tokens");
    metric(list, T.completion, usage.completion_tokens, "pg-completion-tokens");
    metric(list, T.cached, details.cached_tokens || (result.usage ? 0 : null), "pg-cached-tokens");
    metric(list, T.request_id, result.requestId, "pg-request-id");
    if (result.replica) metric(list, T.replica, result.replica, "pg-replica");
    if (result.requestId) fetchRecord(result, list, 0);
  }

  // The usage record (written off the request path: 202 until then, so polled briefly): the channel (admins),
  // the status the gateway recorded and its error, which names the upstream's status.
  function fetchRecord(result, list, attempt) {
    fetch(config.record_url.replace("REQUEST_ID", encodeURIComponent(result.requestId)), {credentials: "same-origin"})
      .then(function (resp) {
        if (resp.status === 202 && attempt < 20) {
          setTimeout(function () { fetchRecord(result, list, attempt + 1); }, 250 + attempt * 100);
          return null;
        }
        return resp.status === 200 ? resp.json() : null;
      })
      .then(function (record) {
        if (!record) return;
        metric(list, T.channel, record.channel_name, "pg-channel");
        metric(list, T.http_status, record.http_status, "pg-http-status");
        // The record's error once more only when it says more than the answer did (an upstream's
        // status); after a stop it is the disconnect the reader caused.
        var stopped = result.error && result.error.code === "aborted";
        if (record.error && !stopped && !(result.error && result.error.message === record.error)) {
          metric(list, T.error, record.error, "pg-record-error");
        }
        if (record.estimated) metric(list, T.completion, record.completion_tokens + " (" + T.estimated + ")");
        var steps = record.route_explanation_text || (result.route ? result.route.split("; ") : null);
        if (steps && steps.length) {
          var ol = el("ol", {className: "route-explanation"});
          steps.forEach(function (s) { ol.appendChild(el("li", {text: s})); });
          var details = el("details", {className: "pg-route"}, [el("summary", {text: T.routing}), ol]);
          list.parentNode.insertBefore(details, list.nextSibling);
        }
        list.setAttribute("data-record", "loaded");
      })
      .catch(function () { /* the metrics already shown stay */ });
  }

  // --- models -------------------------------------------------------------------------------
  function loadModels() {
    return gateway("/models", {}).then(function (resp) { return resp.json(); }).then(function (data) {
      // Chat models only: an embedding model answers /v1/embeddings, never a conversation.
      models = (data.data || []).filter(function (m) { return m.kind !== "embedding"; })
        .map(function (m) { return m.id; }).sort();
      if (config.channel) {  // testing one channel: the models it serves (aliases route elsewhere)
        models = models.filter(function (id) { return config.channel.models.indexOf(id) >= 0; });
      }
      var select = $("pg-model");
      select.replaceChildren();
      if (!models.length) select.appendChild(el("option", {value: "", text: T.no_models}));
      models.forEach(function (id) {
        var option = el("option", {value: id, text: id});
        if (id === config.model) option.selected = true;
        select.appendChild(option);
      });
      var box = $("pg-compare-models");
      box.querySelectorAll("label").forEach(function (l) { l.remove(); });
      models.forEach(function (id) {
        box.appendChild(el("label", {}, [el("input", {type: "checkbox", name: "compare", value: id}), " " + id]));
      });
      updateCode();
    });
  }

  // --- chat ---------------------------------------------------------------------------------
  function userContent(text) {
    if (!pendingImage) return text;
    return [{type: "text", text: text}, {type: "image_url", image_url: {url: pendingImage}}];
  }

  function addTurn(role, text, image) {
    var turn = el("article", {className: "pg-turn pg-" + role, "data-role": role}, [
      el("header", {text: role === "user" ? T.you : T.assistant}),
    ]);
    if (role === "user") {
      var body = el("div", {className: "pg-user-text", text: text});
      turn.appendChild(body);
      if (image) turn.appendChild(el("img", {src: image, alt: "", className: "pg-thumb"}));
    }
    $("pg-conversation").appendChild(turn);
    return turn;
  }

  function send(event) {
    event.preventDefault();
    var model = $("pg-model").value;
    var text = $("pg-input").value.trim();
    if (!model) { alert(T.pick_model); return; }
    if (!text) return;
    conversation.push({role: "user", content: userContent(text)});
    addTurn("user", text, pendingImage);
    pendingImage = null;
    $("pg-image").value = "";
    $("pg-attached").textContent = "";
    $("pg-input").value = "";
    var turn = addTurn("assistant");
    turn.setAttribute("data-model", model);
    controller = new AbortController();
    $("pg-send").disabled = true;
    $("pg-stop-button").hidden = false;
    streamChat(model, conversation, turn, controller.signal).then(function (result) {
      if (result.text) conversation.push({role: "assistant", content: result.text});
      else conversation.pop();  // a failed turn is not sent again with the next message
      $("pg-send").disabled = false;
      $("pg-stop-button").hidden = true;
      controller = null;
      updateCode();
    });
  }

  // --- compare --------------------------------------------------------------------------------
  function compare() {
    var chosen = Array.prototype.map.call(
      document.querySelectorAll("#pg-compare-models input:checked"), function (i) { return i.value; });
    if (chosen.length < 2 || chosen.length > 3) { alert(T.compare_pick); return; }
    var prompt = $("pg-compare-input").value.trim();
    if (!prompt) return;
    var results = $("pg-compare-results");
    results.replaceChildren();
    results.setAttribute("data-running", String(chosen.length));
    chosen.forEach(function (model) {
      var column = el("article", {className: "pg-compare-column", "data-model": model}, [el("header", {text: model})]);
      results.appendChild(column);
      streamChat(model, [{role: "user", content: prompt}], column).then(function () {
        results.setAttribute("data-running", String(Number(results.getAttribute("data-running")) - 1));
      });
    });
  }

  // --- check every surface --------------------------------------------------------------------
  var TOOL = {name: "get_weather", description: "Get the current weather in a city.",
    parameters: {type: "object", properties: {city: {type: "string"}}, required: ["city"]}};
  var TEXT_PROMPT = "Say hello in one short sentence.";
  var TOOL_PROMPT = "What is the weather in Paris? Use the get_weather tool.";

  var SURFACES = [
    {
      name: "Chat Completions", path: "/chat/completions",
      body: function (model, prompt, stream, tools) {
        var b = {model: model, messages: [{role: "user", content: prompt}], max_tokens: 64, stream: stream};
        if (tools) b.tools = [{type: "function", function: TOOL}];
        return b;
      },
      text: function (d) { return ((d.choices || [])[0] || {}).message && d.choices[0].message.content; },
      tool: function (d) { var m = ((d.choices || [])[0] || {}).message || {}; return (m.tool_calls || []).length > 0; },
      delta: function (e) { return ((e.choices || [])[0] || {}).delta && e.choices[0].delta.content; },
    },
    {
      name: "Responses", path: "/responses",
      body: function (model, prompt, stream, tools) {
        var b = {model: model, input: prompt, max_output_tokens: 64, stream: stream};
        if (tools) b.tools = [{type: "function", name: TOOL.name, description: TOOL.description, parameters: TOOL.parameters}];
        return b;
      },
      text: function (d) {
        return (d.output || []).filter(function (o) { return o.type === "message"; })
          .map(function (o) { return (o.content || []).map(function (c) { return c.text || ""; }).join(""); }).join("");
      },
      tool: function (d) { return (d.output || []).some(function (o) { return o.type === "function_call"; }); },
      delta: function (e) { return e.type === "response.output_text.delta" && e.delta; },
    },
    {
      name: "Messages", path: "/messages",
      body: function (model, prompt, stream, tools) {
        var b = {model: model, messages: [{role: "user", content: prompt}], max_tokens: 64, stream: stream};
        if (tools) b.tools = [{name: TOOL.name, description: TOOL.description, input_schema: TOOL.parameters}];
        return b;
      },
      text: function (d) { return (d.content || []).map(function (c) { return c.type === "text" ? c.text : ""; }).join(""); },
      tool: function (d) { return (d.content || []).some(function (c) { return c.type === "tool_use"; }); },
      delta: function (e) { return e.type === "content_block_delta" && e.delta && e.delta.type === "text_delta" && e.delta.text; },
    },
  ];

  function failure(resp, raw) {
    var data; try { data = JSON.parse(raw); } catch (e) { data = raw; }
    var err = errorOf(data, resp.status);
    var detail = "HTTP " + resp.status + (err.code ? " " + err.code : "") + ": " + err.message;
    return {ok: false, why: meaning(err) + " (" + detail + ")"};
  }

  function checkOnce(surface, model, kind) {
    var stream = kind === "stream";
    var prompt = kind === "tool" ? TOOL_PROMPT : TEXT_PROMPT;
    return gateway(surface.path, {body: surface.body(model, prompt, stream, kind === "tool")}).then(function (resp) {
      if (!resp.ok) return resp.text().then(function (raw) { return failure(resp, raw); });
      if (stream) {
        var text = "", error = null;
        return readEvents(resp, function (e) {
          if (e.error || e.type === "error" || e.type === "response.failed") error = errorOf(e.error ? e : (e.response || e), resp.status);
          var d = surface.delta(e);
          if (d) text += d;
        }).then(function () {
          if (error) return {ok: false, why: meaning(error) + " (" + error.message + ")"};
          return text ? {ok: true, why: text.slice(0, 80)} : {ok: false, why: T.no_text};
        });
      }
      return resp.json().then(function (data) {
        if (kind === "tool") return surface.tool(data) ? {ok: true, why: TOOL.name} : {ok: false, why: T.no_tool_call};
        var text = surface.text(data);
        return text ? {ok: true, why: text.slice(0, 80)} : {ok: false, why: T.no_text};
      });
    }).catch(function (err) { return {ok: false, why: String(err.message || err)}; });
  }

  function mark(cell, outcome) {
    cell.replaceChildren(
      el("strong", {text: outcome.ok ? "✓ " + T.pass : "✗ " + T.fail}),
      el("br"),
      el("small", {text: outcome.why}));
    cell.className = outcome.ok ? "pg-pass" : "pg-fail";
    cell.setAttribute("data-outcome", outcome.ok ? "pass" : "fail");
  }

  function checkSurfaces() {
    var model = $("pg-model").value;
    if (!model) { alert(T.pick_model); return; }
    var body = document.querySelector("#pg-surfaces-table tbody");
    body.replaceChildren();
    var table = $("pg-surfaces-table");
    table.setAttribute("data-model", model);
    table.removeAttribute("data-done");
    var jobs = [];
    SURFACES.forEach(function (surface) {
      var row = el("tr", {"data-surface": surface.path}, [el("th", {text: surface.name})]);
      ["text", "stream", "tool"].forEach(function (kind) {
        var cell = el("td", {"data-check": kind, text: T.checking});
        row.appendChild(cell);
        jobs.push(function () { return checkOnce(surface, model, kind).then(function (o) { mark(cell, o); }); });
      });
      body.appendChild(row);
    });
    // One after the other: a small local model serves one request at a time anyway.
    jobs.reduce(function (p, job) { return p.then(job); }, Promise.resolve()).then(function () {
      table.setAttribute("data-done", "1");
    });
  }

  // --- copy as code ---------------------------------------------------------------------------
  var codeLang = "curl";
  function currentRequest() {
    var messages = conversation.slice();
    var draft = $("pg-input").value.trim();
    if (draft || !messages.length) messages.push({role: "user", content: draft || "Hello!"});
    var body = chatBody($("pg-model").value || "MODEL", messages);
    delete body.stream_options;
    return body;
  }

  function py(value, indent) {
    return JSON.stringify(value, null, 4).replace(/\btrue\b/g, "True").replace(/\bfalse\b/g, "False")
      .replace(/\bnull\b/g, "None").split("\n").join("\n" + (indent || ""));
  }

  function updateCode() {
    var target = $("pg-code");
    if (!target) return;
    var key = T.key_placeholder;
    var url = config.gateway_url;
    var body = currentRequest();
    var code;
    if (codeLang === "curl") {
      code = "curl " + url + "/chat/completions \\\n  -H 'Authorization: Bearer " + key + "' \\\n" +
        "  -H 'Content-Type: application/json' \\\n  -d '" + JSON.stringify(body, null, 2).replace(/'/g, "'\\''") + "'";
    } else if (codeLang === "openai") {
      var args = Object.keys(body).map(function (k) { return "    " + k + "=" + py(body[k], "    ") + ","; }).join("\n");
      code = "from openai import OpenAI\n\nclient = OpenAI(base_url=\"" + url + "\", api_key=\"" + key + "\")\n" +
        "stream = client.chat.completions.create(\n" + args + "\n)\nfor chunk in stream:\n" +
        "    if chunk.choices:\n        print(chunk.choices[0].delta.content or \"\", end=\"\", flush=True)\n";
    } else if (codeLang === "anthropic") {
      var system = body.messages.filter(function (m) { return m.role === "system"; }).map(function (m) { return m.content; }).join("\n");
      var msgs = body.messages.filter(function (m) { return m.role !== "system"; });
      var extra = "";
      if (system) extra += "    system=" + py(system) + ",\n";
      ["temperature", "top_p"].forEach(function (k) { if (k in body) extra += "    " + k + "=" + body[k] + ",\n"; });
      if (body.stop) extra += "    stop_sequences=" + py(body.stop) + ",\n";
      code = "import anthropic\n\nclient = anthropic.Anthropic(base_url=\"" + url.replace(/\/v1$/, "") + "\", api_key=\"" + key + "\")\n" +
        "with client.messages.stream(\n    model=" + py(body.model) + ",\n    max_tokens=" + (body.max_tokens || 1024) + ",\n" +
        extra + "    messages=" + py(msgs, "    ") + ",\n) as stream:\n" +
        "    for text in stream.text_stream:\n        print(text, end=\"\", flush=True)\n";
    } else {
      code = "const response = await fetch(\"" + url + "/chat/completions\", {\n  method: \"POST\",\n" +
        "  headers: {\"Authorization\": \"Bearer " + key + "\", \"Content-Type\": \"application/json\"},\n" +
        "  body: JSON.stringify(" + JSON.stringify(body, null, 2).split("\n").join("\n  ") + "),\n});\n" +
        "const reader = response.body.getReader();\nconst decoder = new TextDecoder();\n" +
        "for (;;) {\n  const {done, value} = await reader.read();\n  if (done) break;\n" +
        "  console.log(decoder.decode(value, {stream: true}));  // SSE: data: {...} lines\n}\n";
    }
    target.textContent = code;
  }

  // --- wiring -------------------------------------------------------------------------------
  document.querySelectorAll(".pg-tabs [data-tab]").forEach(function (link) {
    link.addEventListener("click", function (event) {
      event.preventDefault();
      document.querySelectorAll(".pg-tabs [data-tab]").forEach(function (l) { l.removeAttribute("aria-current"); });
      link.setAttribute("aria-current", "page");
      document.querySelectorAll(".pg-tab").forEach(function (s) { s.hidden = s.id !== "tab-" + link.dataset.tab; });
      if (link.dataset.tab === "code") updateCode();
    });
  });
  document.querySelectorAll(".pg-code-tabs [data-code]").forEach(function (link) {
    link.addEventListener("click", function (event) {
      event.preventDefault();
      document.querySelectorAll(".pg-code-tabs [data-code]").forEach(function (l) { l.removeAttribute("aria-current"); });
      link.setAttribute("aria-current", "page");
      codeLang = link.dataset.code;
      updateCode();
    });
  });
  $("pg-chat-form").addEventListener("submit", send);
  $("pg-input").addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) send(event);
  });
  $("pg-stop-button").addEventListener("click", function () { if (controller) controller.abort(); });
  $("pg-clear").addEventListener("click", function () {
    conversation = [];
    $("pg-conversation").replaceChildren();
    updateCode();
  });
  $("pg-image").addEventListener("change", function () {
    var file = this.files && this.files[0];
    if (!file) { pendingImage = null; return; }
    var reader = new FileReader();
    reader.onload = function () {
      pendingImage = reader.result;
      $("pg-attached").textContent = T.image_attached.replace("{name}", file.name);
    };
    reader.readAsDataURL(file);
  });
  $("pg-compare-send").addEventListener("click", compare);
  $("pg-surfaces-run").addEventListener("click", checkSurfaces);
  $("pg-settings").addEventListener("input", updateCode);

  getCredential().then(loadModels).then(function () {
    document.body.setAttribute("data-playground", "ready");
  }).catch(function (err) {
    $("pg-conversation").appendChild(el("p", {className: "pg-error", role: "alert", text: String(err.message || err)}));
    document.body.setAttribute("data-playground", "failed");
  });
})();

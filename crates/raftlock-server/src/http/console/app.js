// raftlock console: plain JavaScript, no dependencies, served by every node at /ui/.
// Credentials live in sessionStorage only; every call goes to the node that served the page
// (followers forward to the leader).
"use strict";

const $ = (id) => document.getElementById(id);
const store = window.sessionStorage;

function text(tag, content, cls) {
  const el = document.createElement(tag);
  el.textContent = content === undefined || content === null ? "" : String(content);
  if (cls) el.className = cls;
  return el;
}

function table(el, headers, rows) {
  el.replaceChildren();
  if (!rows.length) return;
  const head = document.createElement("tr");
  headers.forEach((h) => head.appendChild(text("th", h)));
  el.appendChild(head);
  rows.forEach((cells) => {
    const tr = document.createElement("tr");
    cells.forEach((c) => tr.appendChild(c instanceof Node ? wrap(c) : text("td", c)));
    el.appendChild(tr);
  });
}

function wrap(node) {
  const td = document.createElement("td");
  td.appendChild(node);
  return td;
}

async function call(method, path, token, body) {
  const init = { method, headers: { Authorization: "Bearer " + token } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const data = r.status === 204 ? {} : await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(data.error || data.message || r.status + " " + r.statusText);
  return data;
}

async function showCluster(token) {
  if (!token) return;
  try {
    const s = await call("GET", "/admin/v1/cluster/status", token);
    const members = (s.members || []).map((m) => m.id + (m.voter ? "" : " (learner)"));
    $("cluster-status").textContent = "term " + s.term + ", members " + members.join(", ");
    $("leader-badge").replaceChildren(text("span", "leader " + (s.leader ?? "none"), "badge"));
    $("leader-badge").dataset.leader = s.leader ?? "";
    table($("nodes"), ["node", "address", "ready", "term", "commit", "applied", "clock offset"],
      (s.nodes || []).map((n) => {
        const v = n.view || {};
        return [n.id, n.addr, text("span", n.ready ? "ready" : "not ready", n.ready ? "ok" : "bad"),
          v.term ?? "-", v.commit_index ?? "-", v.applied_index ?? "-",
          v.clock_offset_ms === undefined ? "-" : v.clock_offset_ms + " ms"];
      }));
    showShards(s.shards || []);
  } catch (e) {
    $("cluster-status").textContent = "cluster: " + e.message;
  }
}

// The meta group and the data shards, once the cluster has any data shard.
function showShards(shards) {
  const rows = shards.length < 2 ? [] : shards.map((sh) => {
    const name = text("span", sh.id === 0 ? "meta" : "shard " + sh.id);
    name.dataset.shard = sh.id;
    name.dataset.leader = sh.leader ?? "";
    return [name, (sh.members || []).join(", "), sh.leader ?? "-", sh.term ?? "-",
      (sh.projects || []).length + " project(s)"];
  });
  table($("shards"), ["group", "members", "leader", "term", "projects"], rows);
}

async function forceRelease(key) {
  if (!window.confirm("Force-release " + key + "? Its holder loses the lock at once.")) return;
  try {
    await call("DELETE", "/locks/" + encodeURIComponent(key), store.getItem("project-key"));
  } catch (e) {
    window.alert("force release failed: " + e.message);
  }
  refresh();
}

async function showLocks(key) {
  if (!key) return;
  try {
    const page = await call("GET", "/locks?limit=1000", key);
    $("locks-status").textContent = page.locks.length + " lock(s)" + (page.next ? " (first 1000)" : "");
    table($("locks"), ["key", "state", "fencing token", "expires at", "holder", ""],
      page.locks.map((l) => {
        const button = text("button", "Force release", "danger");
        button.dataset.key = l.key;
        button.addEventListener("click", () => forceRelease(l.key));
        const row = [text("span", l.key), text("span", l.state, l.state === "held" ? "ok" : "grace"),
          l.fencing_token, l.expires_at, l.holder + "…", button];
        row[0].dataset.lock = l.key;
        return row;
      }));
  } catch (e) {
    $("locks-status").textContent = "project locks: " + e.message;
  }
}

// Hierarchical-lock times are int64 nanoseconds since the epoch (as strings or numbers).
function when(ns) {
  const ms = Number(ns) / 1e6;
  return Number.isFinite(ms) && ms > 0 ? new Date(ms).toISOString().replace(/\.\d+Z$/, "Z") : "-";
}

async function rpc(method, body, key) {
  return call("POST", "/v1beta/" + method, key, body);
}

async function showHierarchy(key) {
  if (!key) return;
  try {
    const spaces = (await rpc("ListNamespaces", { limit: 250 }, key)).namespaces || [];
    $("hier-status").textContent = spaces.length + " namespace(s)";
    const blocks = await Promise.all(spaces.map(async (ns) => {
      const [locks, leases, waiting, sems, groups, barriers] = await Promise.all([
        rpc("ListLocks", { namespace_name: ns.name, limit: 250 }, key),
        rpc("ListLockLeases", { namespace_name: ns.name, limit: 250 }, key),
        rpc("ListWaiters", { namespace_name: ns.name }, key),
        rpc("ListSemaphores", { namespace_name: ns.name, limit: 250 }, key),
        rpc("ListWaitGroups", { namespace_name: ns.name, limit: 250 }, key),
        rpc("ListBarriers", { namespace_name: ns.name, limit: 250 }, key),
      ]);
      // Maps, not plain objects: a lock may be named `constructor` or `__proto__`.
      const queues = new Map();
      (waiting.waiters || []).forEach((w) => {
        if (!queues.has(w.lock_name)) queues.set(w.lock_name, []);
        queues.get(w.lock_name).push(
          w.position + ". " + w.lease_id.slice(0, 8) + "… " + (w.exclusive ? "exclusive" : "shared"));
      });
      const div = document.createElement("div");
      div.className = "ns";
      div.appendChild(text("h3", ns.name + (ns.description ? " — " + ns.description : "")));
      const lt = document.createElement("table");
      const names = new Set((locks.locks || []).map((l) => l.name).concat([...queues.keys()]));
      const byName = new Map((locks.locks || []).map((l) => [l.name, l]));
      table(lt, ["lock", "state", "holders (lease)", "waiting"], [...names].sort().map((name) => {
        const l = byName.get(name);
        return [name, l ? l.state.replace("LOCK_STATE_", "").toLowerCase() : "unlocked",
          l ? (l.lock_holders || []).map((h) => h.lease_id.slice(0, 8) + "…").join(", ") : "",
          (queues.get(name) || []).join("; ")];
      }));
      div.appendChild(lt);
      const et = document.createElement("table");
      table(et, ["lease", "process", "expires at"], (leases.leases || []).map((l) => [
        l.lease_id, l.process_id, when(l.expires_at),
      ]));
      div.appendChild(et);
      appendPrimitives(div, sems, groups, barriers);
      return div;
    }));
    $("namespaces").replaceChildren(...blocks);
  } catch (e) {
    $("hier-status").textContent = "hierarchical locks: " + e.message;
  }
}

// Semaphores, wait groups and barriers of a namespace, one table each (only when present).
function appendPrimitives(div, sems, groups, barriers) {
  const add = (headers, rows) => {
    if (!rows.length) return;
    const t = document.createElement("table");
    table(t, headers, rows);
    div.appendChild(t);
  };
  add(["semaphore", "held / permits", "holders"], (sems.semaphores || []).map((s) => [
    s.name, s.active_holds + " / " + s.permits, String(s.active_holders_count),
  ]));
  add(["wait group", "status", "jobs done / counter", "expires at"], (groups.wait_groups || []).map((g) => [
    g.name, g.status.replace("WAIT_GROUP_STATUS_", "").toLowerCase(),
    g.completed_jobs + " / " + g.counter, when(g.expires_at),
  ]));
  add(["barrier", "generation", "arrived / expected"], (barriers.barriers || []).map((b) => [
    b.name, String(b.generation), b.arrived_processes + " / " + b.expected_processes,
  ]));
}

let busy = false;
async function refresh() {
  if (busy) return;
  busy = true;
  try {
    await Promise.all([
      showCluster(store.getItem("platform-token")),
      showLocks(store.getItem("project-key")),
      showHierarchy(store.getItem("project-key")),
    ]);
  } finally {
    busy = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("credentials").addEventListener("submit", (ev) => {
    ev.preventDefault();
    store.setItem("platform-token", $("platform-token").value.trim());
    store.setItem("project-key", $("project-key").value.trim());
    $("platform-token").value = "";
    $("project-key").value = "";
    refresh();
  });
  $("forget").addEventListener("click", () => {
    store.clear();
    window.location.reload();
  });
  refresh();
  window.setInterval(refresh, 2000);
});

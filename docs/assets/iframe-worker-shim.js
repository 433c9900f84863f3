/* A Web Worker stand-in for the docs opened from disk (file://), written for this site.
 *
 * Browsers refuse `new Worker(url)` on file:// pages, so the theme's search worker would not
 * start there. The theme's offline plugin fills that gap with a shim it loads from a CDN at
 * view time; this file replaces it (its name keeps the plugin from adding that one), so
 * nothing is fetched from elsewhere. The worker's script runs in a hidden iframe of its own
 * and talks to the page through messages, as a worker would. Served over http(s), the real
 * Worker is left alone. */
(function () {
  "use strict";
  if (window.location.protocol !== "file:") return;

  function later(fn) {
    window.setTimeout(fn, 0); // a worker's messages never arrive in the caller's own turn
  }

  class FrameWorker extends EventTarget {
    constructor(url) {
      super();
      this.onmessage = null;
      this.onerror = null;
      this.pending = []; // messages sent before the worker's script has loaded
      this.scope = null;
      this.frame = document.createElement("iframe");
      this.frame.style.display = "none";
      const start = () => this.start(new URL(url, window.location.href).href);
      if (document.body) start();
      else document.addEventListener("DOMContentLoaded", start, { once: true });
    }

    start(src) {
      document.body.appendChild(this.frame);
      const scope = this.frame.contentWindow;
      // In the frame, `postMessage(data)` is the worker answering its page.
      scope.postMessage = (data) => later(() => this.deliver(data));
      scope.importScripts = () => {
        throw new Error("importScripts is not available to a worker run from disk");
      };
      const script = scope.document.createElement("script");
      script.onload = () => {
        this.scope = scope;
        this.pending.splice(0).forEach((data) => this.post(data));
      };
      script.onerror = () => this.fail(new Error(`worker script did not load: ${src}`));
      script.src = src;
      scope.document.head.appendChild(script);
    }

    deliver(data) {
      const event = new MessageEvent("message", { data: data });
      if (typeof this.onmessage === "function") this.onmessage(event);
      this.dispatchEvent(event);
    }

    fail(error) {
      const event = new ErrorEvent("error", { error: error, message: String(error) });
      if (typeof this.onerror === "function") this.onerror(event);
      this.dispatchEvent(event);
    }

    post(data) {
      const scope = this.scope;
      later(() => scope.dispatchEvent(new scope.MessageEvent("message", { data: data })));
    }

    postMessage(data) {
      if (this.scope) this.post(data);
      else this.pending.push(data);
    }

    terminate() {
      this.frame.remove();
      this.scope = null;
    }
  }

  window.Worker = FrameWorker;
})();

// The live page: refresh its state fragment in place, without reloading the page.
const live = document.getElementById("live");
if (live && live.dataset.refresh) {
  const every = Number(live.dataset.refresh);
  const refresh = async () => {
    try {
      const reply = await fetch(live.dataset.src, { credentials: "same-origin", cache: "no-store" });
      if (reply.ok) {
        live.innerHTML = await reply.text();  // server-rendered and escaped
        live.dataset.refreshed = String(Number(live.dataset.refreshed || 0) + 1);
      }
    } catch (error) {
      live.dataset.error = String(error);
    }
  };
  setInterval(refresh, every);
}

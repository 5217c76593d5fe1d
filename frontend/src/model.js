// An in-memory stand-in for the anywidget model (get / set / save_changes / on / off / send),
// so static pages (HTML export, the JupyterLab extension) run the very same render().

/** Trait defaults; the Python widget defines the same names. */
export const TRAIT_DEFAULTS = Object.freeze({
  document: null,
  selected: "",
  highlight: [],
  current_step: -1,
  steps: [],
  tab: "",
  expanded: [],
  live: false,
});

/**
 * @param {Record<string, any>} [initial] trait values
 * @param {{onSend?: (msg: any) => void}} [options] onSend receives what model.send() is given
 */
export function createModel(initial = {}, options = {}) {
  const state = { ...TRAIT_DEFAULTS, ...initial };
  /** @type {Map<string, Set<Function>>} */
  const listeners = new Map();

  const emit = (event, ...args) => {
    for (const callback of [...(listeners.get(event) || [])]) callback(...args);
  };

  return {
    get(name) {
      return state[name];
    },
    set(name, value) {
      if (state[name] === value) return;
      state[name] = value;
      // like Backbone (which anywidget wraps), set() fires change events synchronously
      emit(`change:${name}`, value);
    },
    save_changes() {},
    on(event, callback) {
      if (!listeners.has(event)) listeners.set(event, new Set());
      listeners.get(event).add(callback);
    },
    off(event, callback) {
      if (!event) listeners.clear();
      else if (!callback) listeners.delete(event);
      else if (listeners.has(event)) listeners.get(event).delete(callback);
    },
    send(message) {
      if (options.onSend) options.onSend(message);
    },
    /** Deliver a custom message as a kernel would ("msg:custom"). */
    receive(message) {
      emit("msg:custom", message);
    },
  };
}

/** A listener for one event type: receives the standard `CustomEvent` carrying the typed detail. */
export type TypedEventListener<T> = (event: CustomEvent<T>) => void;

type AnyListener = EventListenerOrEventListenerObject | TypedEventListener<never>;

/**
 * The standard `EventTarget` (Node 20 and browsers) with the event names and `detail` types of
 * `EventMap` checked at compile time. `on()` is a shorthand that hands the listener the detail
 * and returns the matching unsubscribe function; it takes the names of `EventMap` only, whereas
 * `addEventListener` keeps the standard overload for any name with an untyped listener (so the
 * class stays assignable to `EventTarget`), where a misspelt name compiles.
 *
 * Delivery is synchronous and in registration order. A listener that throws does not stop the
 * others or the emitter, but the runtime reports the exception as for any EventTarget: browsers
 * log it, Node raises it as an uncaught exception.
 */
export class TypedEventTarget<EventMap extends object> extends EventTarget {
  override addEventListener<K extends keyof EventMap & string>(
    type: K,
    listener: TypedEventListener<EventMap[K]> | null,
    options?: boolean | AddEventListenerOptions,
  ): void;
  override addEventListener(type: string, listener: EventListenerOrEventListenerObject | null, options?: boolean | AddEventListenerOptions): void;
  override addEventListener(type: string, listener: AnyListener | null, options?: boolean | AddEventListenerOptions): void {
    super.addEventListener(type, listener as EventListenerOrEventListenerObject | null, options);
  }

  override removeEventListener<K extends keyof EventMap & string>(
    type: K,
    listener: TypedEventListener<EventMap[K]> | null,
    options?: boolean | EventListenerOptions,
  ): void;
  override removeEventListener(type: string, listener: EventListenerOrEventListenerObject | null, options?: boolean | EventListenerOptions): void;
  override removeEventListener(type: string, listener: AnyListener | null, options?: boolean | EventListenerOptions): void {
    super.removeEventListener(type, listener as EventListenerOrEventListenerObject | null, options);
  }

  /** Calls `listener` with the detail of every `type` event; returns a function that stops it. */
  on<K extends keyof EventMap & string>(type: K, listener: (detail: EventMap[K]) => void, options?: AddEventListenerOptions): () => void {
    const wrapped = (event: Event): void => listener((event as CustomEvent<EventMap[K]>).detail);
    super.addEventListener(type, wrapped, options);
    return () => super.removeEventListener(type, wrapped, options);
  }

  protected emit<K extends keyof EventMap & string>(type: K, detail: EventMap[K]): void {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }
}

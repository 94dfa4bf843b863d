/**
 * Runs async tasks one at a time, in call order. A failed task rejects its own promise only; the
 * next task runs regardless.
 */
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(task: () => Promise<T>): Promise<T> {
    const result = this.tail.then(task);
    this.tail = result.catch(() => undefined);
    return result;
  }
}

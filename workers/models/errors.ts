/**
 * Typed errors for reading and writing model directories. A bad model directory is a
 * configuration problem of the process that was pointed at it, hence `config_invalid`.
 */
import { TandemError } from '../../runtime/errors.js';

export class ModelFormatError extends TandemError {
  override readonly name = 'ModelFormatError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('config_invalid', message, options);
  }
}

/**
 * What a client reads of an error (frontend/errors.ts `errorBody`, the one place every error
 * body and SSE error frame is built): a runtime fault gets its code's fixed sentence, and no
 * message carries a network address or a socket error name (issue 23, item 3).
 */
import { describe, expect, it } from 'vitest';
import { ApiError, errorBody, toApiError } from '../../frontend/errors.js';
import { ConnectRefusedError, DeadlineExceededError, NoInstancesError, TandemError, UnavailableError } from '../../runtime/errors.js';

const LEAKS = /127\.0\.0\.1|10\.1\.2\.3|ECONNREFUSED|fd00|worker-3\.svc|:38765|\/tmp\/sock/;

describe('errorBody', () => {
  it('a dead worker\'s socket error becomes the unavailable sentence: no address, no errno', () => {
    const body = errorBody(toApiError(new ConnectRefusedError('No connection established. Last error: Error: connect ECONNREFUSED 127.0.0.1:38765')));
    expect(body.error).toEqual({
      message: 'the worker serving this request became unavailable and no other worker could take it over; retry the request',
      type: 'service_unavailable_error',
      param: null,
      code: 'unavailable',
    });
    expect(errorBody(toApiError(new UnavailableError('Connection dropped'))).error.message).not.toMatch(/Connection dropped/);
    expect(errorBody(toApiError(new DeadlineExceededError('Deadline exceeded after 30.001s,remote_addr=10.1.2.3:9000'))).error.message).toBe('the request timed out on a worker');
    expect(errorBody(toApiError(new TandemError('handler_error', 'EPIPE writing to unix:/tmp/sock'))).error.message).toBe('a worker failed while serving this request');
  });

  it('any other message keeps its words but loses addresses (IPv4, [IPv6], host:port, unix sockets) and socket error names', () => {
    const message = errorBody(toApiError(new TandemError('resource_exhausted', 'worker at 10.1.2.3:9000 / [fd00::1]:9000 / worker-3.svc.cluster.local:9000 / unix:/tmp/sock is full (ECONNREFUSED)'))).error.message;
    expect(message).not.toMatch(LEAKS);
    expect(message).toMatch(/^worker at \[internal\] .* is full/);
    // The frontend's own sentences are left as they are.
    expect(errorBody(new ApiError('unavailable', 'the frontend is shutting down; retry the request')).error.message).toBe('the frontend is shutting down; retry the request');
    expect(errorBody(toApiError(new NoInstancesError("no workers available for model 'm'"))).error.message).toBe("no workers available for model 'm'");
  });

  it('JSON paths with indices are not addresses: a 400 still names its parameter', () => {
    const text = "'tools[0].function.parameters' (function 'tag'): \"uniqueItems\" is not supported (at #/properties/tags/items[12])";
    expect(errorBody(new ApiError('invalid_argument', text, 'tools[0].function.parameters')).error.message).toBe(text);
  });
});

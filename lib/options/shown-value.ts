/** The most characters of a value an error shows; a longer one is cut, and ends with `…`. */
export const SHOWN_VALUE_MAX = 60;

// `scheme://user:password@` or `scheme://:password@`: the password is never shown.
const URL_PASSWORD = /^([a-z][a-z0-9+.-]*:\/\/[^:@/]*:)[^@/]*@/i;

/**
 * A value given for an option as an error shows it: strings quoted, with control characters
 * escaped and a URL's password replaced by `***`; numbers and the like as written; an object or a
 * function by its kind only (its contents may hold secrets); cut to `SHOWN_VALUE_MAX` characters.
 */
export function shownValue(value: unknown): string {
  let text: string;
  if (typeof value === 'string') text = JSON.stringify(value.replace(URL_PASSWORD, '$1***@'));
  else if (typeof value === 'function') text = '[function]';
  else if (Array.isArray(value)) text = `[array(${value.length})]`;
  else if (typeof value === 'symbol') text = '[unreadable]';
  else if (typeof value === 'object' && value !== null) text = '[object]';
  else text = String(value);
  return text.length > SHOWN_VALUE_MAX ? `${text.slice(0, SHOWN_VALUE_MAX - 1)}…` : text;
}

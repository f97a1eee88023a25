// jetpool dashboard: the Replay and Purge… buttons of one dead letter, for
// its row in the list and its own page. app.js passes its DOM helper and
// its POST (which carries the CSRF token).
'use strict';

(() => {
  // oneButtons makes, for a dead letter, its Replay and Purge… buttons
  // (the purge asks first in msg); what they did is said in msg, and
  // after(ok) is called to show the list or the letter as it is now.
  function oneButtons(msg, after, { el, post }) {
    const say = (id, cls, ...text) => msg.replaceChildren(el('div', { class: 'notice ' + cls, id }, text));
    async function replay(d) {
      try {
        const v = await post('api/dlq/' + d.seq + '/replay', {});
        say('replayed-one', '', `Replayed dead letter ${d.seq} (record ${d.record} of job ${d.job}).`, v.note ? ' ' + v.note + '.' : '',
          v.warnings ? el('pre', { class: 'warning' }, 'warning: ' + v.warnings.join('\nwarning: ')) : null,
          ' ', el('a', { href: '#/record/' + encodeURIComponent(d.job) + '/' + encodeURIComponent(d.record) }, 'Follow the record →'));
      } catch (e) {
        say('replay-failed', 'error', `Replay of ${d.seq} failed: ` + e.message);
        return after(false);
      }
      after(true);
    }
    async function purge(d) {
      try {
        await post('api/dlq/' + d.seq + '/purge', {});
        say('purged-one', '', `Purged dead letter ${d.seq}: record ${d.record} stays counted failed, and can no longer be replayed.`);
      } catch (e) {
        say('purge-failed', 'error', `Purge of ${d.seq} failed: ` + e.message);
        return after(false);
      }
      after(true);
    }
    const confirmPurge = (d) => msg.replaceChildren(el('div', { class: 'notice confirm' },
      el('span', {}, `Purge dead letter ${d.seq} (record ${d.record} of job ${d.job}, ${d.reason}) for good? Its record stays failed and cannot be replayed.`),
      el('button', { type: 'button', id: 'confirm-purge-' + d.seq, class: 'danger', onclick: (ev) => { ev.target.disabled = true; purge(d); } }, 'Purge it'),
      el('button', { type: 'button', onclick: () => msg.replaceChildren() }, 'Keep it')));
    return (d) => [
      el('button', { type: 'button', id: 'replay-' + d.seq, class: 'small', title: 'replay this dead letter (jetpool retry --seq ' + d.seq + ')',
        onclick: (ev) => { ev.target.disabled = true; replay(d); } }, 'Replay'), ' ',
      el('button', { type: 'button', id: 'purge-' + d.seq, class: 'small danger', title: 'delete this dead letter for good (jetpool dlq purge --seq ' + d.seq + ')',
        onclick: () => confirmPurge(d) }, 'Purge…')];
  }

  window.jetpoolOneButtons = oneButtons;
})();
